// Byte offsets of the fields of docs/FORMAT.md. The reader and the writer both use these, so
// the two can only disagree with the document, not with each other; the tests check the document.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "embedrt/format.hpp"

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

// A table row (section 4.2): its values (int4: two codes a byte, the first in the low nibble), then
// for the rowwise-quantized dtypes the row's scale and bias at the next multiple of 4 bytes (int8:
// two f32; int4: two f16). constexpr so that the kernels plan with the same rules at compile time,
// and static so that every translation unit has its own copy: a kernel unit, compiled for a wider
// ISA, must define no symbol another unit shares (the linker could keep its copy for all callers;
// the kernels.no_shared_symbols test).
namespace row {
static constexpr std::uint64_t value_bytes(DType dtype, std::uint64_t values) noexcept {
  switch (dtype) {
    case DType::kF32:
    case DType::kInt32: return 4 * values;
    case DType::kF16:
    case DType::kBF16: return 2 * values;
    case DType::kInt8Rowwise: return values;
    case DType::kInt4Rowwise: return values / 2 + values % 2;
  }
  return 0;
}
static constexpr std::uint64_t params_bytes(DType dtype) noexcept {
  return dtype == DType::kInt8Rowwise ? 8 : dtype == DType::kInt4Rowwise ? 4 : 0;
}
// The offset of a quantized row's scale (its bias follows): its values rounded up to 4 bytes; 0 for
// other dtypes. (Rounded here, not by byte_io.hpp's align_up, which is not static.)
static constexpr std::uint64_t params_offset(DType dtype, std::uint64_t dim) noexcept {
  return params_bytes(dtype) == 0 ? 0 : (value_bytes(dtype, dim) + 3) / 4 * 4;
}
// row_bytes(dtype, dim) of the document.
static constexpr std::uint64_t bytes(DType dtype, std::uint64_t dim) noexcept {
  return params_bytes(dtype) == 0 ? value_bytes(dtype, dim) : params_offset(dtype, dim) + params_bytes(dtype);
}
}  // namespace row

inline constexpr std::uint32_t kMaxTables = 65536;
inline constexpr std::uint64_t kMaxMetadataSize = 16u << 20;
inline constexpr std::size_t kFooterSize = 8;

}  // namespace embedrt::detail
