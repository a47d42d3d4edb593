// A JSON document (tools/common/inspect_json.hpp builds them) as Python objects: dict, list,
// str, int, float, bool, None. Strings that are not valid UTF-8 (names from hostile checkpoints)
// get U+FFFD in place of the bad bytes, as the CLI prints them.
#pragma once

#include <nanobind/nanobind.h>

#include <nlohmann/json.hpp>

namespace embedrt::python {

nanobind::object to_python(const nlohmann::ordered_json& value);

}  // namespace embedrt::python
