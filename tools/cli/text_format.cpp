#include "text_format.hpp"

#include <charconv>
#include <cmath>

#include "commands.hpp"

namespace embedrt::cli {

std::string format_float(float value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

int report(const Error& error) {
  std::fprintf(stderr, "embedrt: error: %s\n", error.message().c_str());
  return error.code() == ErrorCode::kInvalidArgument ? kExitUsage : kExitFailure;
}

}  // namespace embedrt::cli
