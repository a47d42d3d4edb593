// The parts of the module embedrt._ext, each registered by its own file.
#pragma once

#include <nanobind/nanobind.h>

namespace embedrt::python {

void bind_model(nanobind::module_& module);  // Model, OutputInfo (model_binding.cpp)
void bind_files(nanobind::module_& module);  // convert, inspect, verify (files_binding.cpp)

}  // namespace embedrt::python
