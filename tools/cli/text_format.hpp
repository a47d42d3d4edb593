// Small formatting helpers shared by the subcommands.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include <optional>

#include "embedrt/embedder.hpp"
#include "embedrt/error.hpp"

namespace embedrt::cli {

// Shortest decimal that reads back as the same float32; NaN and infinities as Python's json
// module writes them (NaN, Infinity, -Infinity).
std::string format_float(float value);

// `text` with control characters and invalid UTF-8 escaped as \xNN: names and messages can come
// from hostile files, and must not reach a terminal as escape sequences.
std::string printable(std::string_view text);

// "f32", "bf16", "f16" (the --out-dtype values) to an output dtype.
std::optional<OutputDType> parse_output_dtype(std::string_view name);

// "embedrt: error: <message>" on stderr; returns kExitFailure (or kExitUsage for bad arguments).
int report(const Error& error);

}  // namespace embedrt::cli
