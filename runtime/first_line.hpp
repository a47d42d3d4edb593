// The first line of a small text file such as a sysfs or procfs entry, without its newline; empty
// when the file cannot be read. Inline because the tools' perf library (tools/perf/machine.cpp)
// reads sysfs too and the runtime exports no internals.
#pragma once

#include <fstream>
#include <string>

namespace embedrt::detail {

inline std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace embedrt::detail
