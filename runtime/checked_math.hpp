// Overflow-checked size arithmetic: the one place every size, count or offset read from a file
// (table files, safetensors headers, zip and pickle records) is added or multiplied. nullopt on
// overflow; callers turn it into an error naming the field.
#pragma once

#include <cstdint>
#include <optional>

namespace embedrt::detail {

inline std::optional<std::uint64_t> checked_add(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<std::uint64_t> checked_mul(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Returns nullopt when rounding up would overflow. `alignment` is a power of two.
inline std::optional<std::uint64_t> checked_align_up(std::uint64_t x, std::uint64_t alignment) noexcept {
  auto sum = checked_add(x, alignment - 1);
  if (!sum) return std::nullopt;
  return *sum & ~(alignment - 1);
}

}  // namespace embedrt::detail
