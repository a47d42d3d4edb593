#include "id_rotation.hpp"

#include <algorithm>
#include <cmath>

namespace embedrt::perf {

std::uint64_t touched_bytes(std::uint64_t rows, std::uint64_t stride, std::uint64_t draws) {
  if (rows == 0) return 0;
  const double n = static_cast<double>(rows);
  const double expected = n * -std::expm1(static_cast<double>(draws) * std::log1p(-1.0 / n));
  return static_cast<std::uint64_t>(expected * static_cast<double>(stride));
}

std::uint64_t id_sets_for(std::uint64_t rows, std::uint64_t stride, std::uint64_t tokens, std::uint64_t llc_bytes) {
  const double n = static_cast<double>(rows);
  const double want = std::min(4.0 * static_cast<double>(llc_bytes) / static_cast<double>(stride), 0.98 * n);
  // touched_bytes's expected rows, solved for the draws.
  const double draws = n > 1 ? std::log1p(-want / n) / std::log1p(-1.0 / n) : 0.0;
  const auto sets = static_cast<std::uint64_t>(std::ceil(draws / static_cast<double>(tokens)));
  const std::uint64_t cap = std::max<std::uint64_t>(8, (std::uint64_t{256} << 20) / (8 * tokens));
  return std::clamp<std::uint64_t>(sets, 8, cap);
}

}  // namespace embedrt::perf
