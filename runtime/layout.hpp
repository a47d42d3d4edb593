// Byte offsets of the fields of docs/FORMAT.md. The reader and the writer both use these, so
// the two can only disagree with the document, not with each other; the tests check the document.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace embedrt::detail {

inline constexpr std::array<unsigned char, 8> kMagic = {0x89, 'E', 'M', 'B', '\r', '\n', 0x1a, '\n'};
inline constexpr std::array<unsigned char, 8> kFooter = {'E', 'M', 'B', 'T', '-', 'E', 'N', 'D'};

namespace header {
inline constexpr std::size_t kSize = 128;
inline constexpr std::size_t kMagicOffset = 0;
inline constexpr std::size_t kVersionMajor = 8;
inline constexpr std::size_t kVersionMinor = 10;
inline constexpr std::size_t kHeaderSize = 12;
inline constexpr std::size_t kFileSize = 16;
inline constexpr std::size_t kTableCount = 24;
inline constexpr std::size_t kEntrySize = 28;
inline constexpr std::size_t kDirectoryOffset = 32;
inline constexpr std::size_t kMetadataOffset = 40;
inline constexpr std::size_t kMetadataSize = 48;
inline constexpr std::size_t kChecksum = 120;
}  // namespace header

namespace entry {
inline constexpr std::size_t kSize = 128;
inline constexpr std::size_t kName = 0;
inline constexpr std::size_t kNameField = 64;
inline constexpr std::size_t kRole = 64;
inline constexpr std::size_t kDType = 68;
inline constexpr std::size_t kRows = 72;
inline constexpr std::size_t kDim = 80;
inline constexpr std::size_t kRowStride = 88;
inline constexpr std::size_t kOffset = 96;
inline constexpr std::size_t kDataSize = 104;
inline constexpr std::size_t kChecksum = 112;
}  // namespace entry

namespace metadata_record {
inline constexpr std::size_t kHeaderSize = 8;
inline constexpr std::uint8_t kU64 = 1;
inline constexpr std::uint8_t kI64 = 2;
inline constexpr std::uint8_t kF64 = 3;
inline constexpr std::uint8_t kString = 4;
}  // namespace metadata_record

inline constexpr std::uint32_t kMaxTables = 65536;
inline constexpr std::uint64_t kMaxMetadataSize = 16u << 20;
inline constexpr std::size_t kFooterSize = 8;

}  // namespace embedrt::detail
