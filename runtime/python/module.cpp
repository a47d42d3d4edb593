// embedrt._ext: the C++ half of the Python package embedrt (runtime/python/embedrt/__init__.py
// re-exports it with the exception classes of _errors.py).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "bindings.hpp"
#include "embedrt/fault_guard.hpp"
#include "embedrt/format.hpp"
#include "embedrt/isa.hpp"
#include "embedrt/version.hpp"
#include "errors.hpp"

namespace nb = nanobind;
using namespace embedrt::python;

NB_MODULE(_ext, m) {
  m.doc() = "The C++ half of embedrt: Model, convert, inspect, verify.";
  register_errors(m);
  bind_model(m);
  bind_files(m);
  m.attr("__version__") = embedrt::version();
  m.attr("format_version") = std::to_string(embedrt::kFormatVersionMajor) + "." + std::to_string(embedrt::kFormatVersionMinor);
  m.def("isa", [] {
        auto isa = embedrt::default_isa();
        if (!isa) raise_error(std::move(isa).error());
        return std::string(embedrt::isa_name(*isa));
      }, "The instruction set new Models use: the best this CPU runs, or EMBEDRT_ISA's.");
  m.def("supported_isas", [] {
        std::vector<std::string> names;
        for (embedrt::Isa isa : embedrt::supported_isas()) names.emplace_back(embedrt::isa_name(isa));
        return names;
      }, "Every instruction set this CPU and OS run, best last.");
  m.def("install_fault_guard", [] {
        if (embedrt::Status s = embedrt::install_fault_guard(); !s) raise_error(std::move(s).error());
      }, R"(Turns a model file truncated under its mapping from a SIGBUS crash into an error of the call
(OSError naming the file). Process-wide and opt-in, as in C++ (embedrt/fault_guard.hpp).)");
}
