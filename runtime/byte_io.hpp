// Little-endian loads and stores at arbitrary byte offsets, and overflow-checked arithmetic:
// the only ways the runtime touches numbers that come from a file.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

namespace embedrt::detail {

static_assert(std::endian::native == std::endian::little,
              "embedrt maps little-endian tables in place and supports little-endian hosts only");

template <typename T>
T load_le(const std::byte* p) noexcept {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

template <typename T>
void store_le(std::byte* p, T value) noexcept {
  std::memcpy(p, &value, sizeof(T));
}

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
inline std::optional<std::uint64_t> checked_align_up(std::uint64_t x,
                                                     std::uint64_t alignment) noexcept {
  auto sum = checked_add(x, alignment - 1);
  if (!sum) return std::nullopt;
  return *sum & ~(alignment - 1);
}

constexpr std::uint64_t align_up(std::uint64_t x, std::uint64_t alignment) noexcept {
  return (x + alignment - 1) & ~(alignment - 1);
}

}  // namespace embedrt::detail
