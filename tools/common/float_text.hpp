// Floats as text for the CLI's and the server's JSON: the shortest decimal that reads back as
// the same float32, and NaN / Infinity / -Infinity spelled as Python's json module writes them.
#pragma once

#include <charconv>
#include <cmath>
#include <string>

namespace embedrt::text {

inline void append_float(std::string& out, float value) {
  if (std::isnan(value)) {
    out += "NaN";
  } else if (std::isinf(value)) {
    out += value > 0 ? "Infinity" : "-Infinity";
  } else {
    char buffer[32];
    const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
    out.append(buffer, result.ptr);
  }
}

}  // namespace embedrt::text
