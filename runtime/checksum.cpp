#include "checksum.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace embedrt::detail {

std::uint64_t checksum(std::span<const std::byte> bytes) noexcept {
  return XXH3_64bits(bytes.data(), bytes.size());
}

std::uint64_t checksum2(std::span<const std::byte> first, std::span<const std::byte> second) noexcept {
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, first.data(), first.size());
  XXH3_64bits_update(&state, second.data(), second.size());
  return XXH3_64bits_digest(&state);
}

}  // namespace embedrt::detail
