// Little-endian loads and stores at arbitrary byte offsets, and overflow-checked arithmetic:
// the only ways the runtime touches numbers that come from a file.
#pragma once

#include "checked_math.hpp"

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

constexpr std::uint64_t align_up(std::uint64_t x, std::uint64_t alignment) noexcept {
  return (x + alignment - 1) & ~(alignment - 1);
}

}  // namespace embedrt::detail
