// Byte-level access to an .embt image for the corrupted-file tests. Offsets come from
// docs/FORMAT.md directly (not from the runtime's layout.hpp), so these tests check the
// implementation against the document; reseal() recomputes the header checksum the way the
// document defines it.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace embedrt::test {

struct RawFile {
  std::vector<unsigned char> bytes;

  template <typename T>
  T get(std::size_t offset) const {
    T v;
    std::memcpy(&v, bytes.data() + offset, sizeof v);
    return v;
  }
  template <typename T>
  void set(std::size_t offset, T v) {
    std::memcpy(bytes.data() + offset, &v, sizeof v);
  }

  // FORMAT.md 3: XXH3-64 of [0, 120) then [128, metadata_offset + metadata_size).
  void reseal() {
    const std::uint64_t front_end = get<std::uint64_t>(40) + get<std::uint64_t>(48);
    XXH3_state_t state;
    XXH3_64bits_reset(&state);
    XXH3_64bits_update(&state, bytes.data(), 120);
    if (front_end > 128 && front_end <= bytes.size()) {
      XXH3_64bits_update(&state, bytes.data() + 128, front_end - 128);
    }
    set<std::uint64_t>(120, XXH3_64bits_digest(&state));
  }

  static constexpr std::size_t entry(std::size_t i) { return 128 + 128 * i; }
};

// Directory entry field offsets (FORMAT.md 4).
namespace field {
inline constexpr std::size_t kRole = 64, kDType = 68, kRows = 72, kDim = 80, kRowStride = 88,
                             kOffset = 96, kSize = 104, kChecksum = 112;
}

}  // namespace embedrt::test
