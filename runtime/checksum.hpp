// XXH3-64 (seed 0), the checksum of docs/FORMAT.md. xxhash.h is used in its inline mode so the
// library has no link-time dependency on libxxhash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace embedrt::detail {

std::uint64_t checksum(std::span<const std::byte> bytes) noexcept;

// Checksum of the concatenation of two ranges (the header without its checksum field, then the
// directory and metadata).
std::uint64_t checksum2(std::span<const std::byte> first, std::span<const std::byte> second) noexcept;

// Checksum of a large mapped range, computed in chunks; after each chunk the pages are dropped
// from this process's resident set (they stay in the page cache), so hashing a file of any size
// costs a bounded amount of memory.
std::uint64_t checksum_mapped(std::span<const std::byte> bytes) noexcept;

}  // namespace embedrt::detail
