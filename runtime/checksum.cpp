#include "checksum.hpp"

#include <algorithm>

#include "embedrt/mapped_file.hpp"

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

std::uint64_t checksum_mapped(std::span<const std::byte> bytes) noexcept {
  constexpr std::size_t kChunk = 32u << 20;
  if (bytes.size() <= kChunk) return checksum(bytes);
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_64bits_reset(&state);
  for (std::size_t at = 0; at < bytes.size(); at += kChunk) {
    const std::size_t n = std::min(kChunk, bytes.size() - at);
    XXH3_64bits_update(&state, bytes.data() + at, n);
    release_resident_pages(bytes.data() + at, bytes.data() + at + n);
  }
  return XXH3_64bits_digest(&state);
}

}  // namespace embedrt::detail
