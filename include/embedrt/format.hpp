// Vocabulary of the .embt format (docs/FORMAT.md): data types, table roles, metadata.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace embedrt {

inline constexpr std::uint16_t kFormatVersionMajor = 1;
inline constexpr std::uint16_t kFormatVersionMinor = 0;
inline constexpr std::size_t kTableAlignment = 4096;  // every table starts on a page
inline constexpr std::size_t kRowAlignment = 64;      // every row starts on a cache line
inline constexpr std::size_t kMaxNameBytes = 63;
inline constexpr std::uint64_t kMaxDim = std::uint64_t{1} << 24;

enum class DType : std::uint32_t {
  kF32 = 1,
  kF16 = 2,
  kBF16 = 3,
  kInt8Rowwise = 4,  // int8 codes with a per-row f32 scale and bias stored in the row
};

enum class Role : std::uint32_t {
  kOther = 0,
  kToken = 1,
  kPosition = 2,
  kSegment = 3,
  kNormWeight = 4,
  kNormBias = 5,
};

enum class PositionKind { kNone, kLearned, kSinusoidal };

// Names as written in the CLI, metadata and messages ("f32", "token", "learned").
std::string_view dtype_name(DType dtype) noexcept;
std::string_view role_name(Role role) noexcept;
std::string_view position_kind_name(PositionKind kind) noexcept;
std::optional<DType> parse_dtype(std::string_view name) noexcept;
std::optional<Role> parse_role(std::string_view name) noexcept;
std::optional<PositionKind> parse_position_kind(std::string_view name) noexcept;

// Bytes of payload in one row (FORMAT.md 4.2), and the row stride a writer uses for it.
std::uint64_t row_bytes(DType dtype, std::uint64_t dim) noexcept;
std::uint64_t default_row_stride(DType dtype, std::uint64_t dim) noexcept;

// Typed model metadata (FORMAT.md section 5).
struct Metadata {
  std::string family = "custom";
  std::string source_files;  // one per line
  std::string source_dtype;
  std::uint64_t context_length = 0;
  std::uint64_t position_offset = 0;
  PositionKind position_kind = PositionKind::kNone;
  double output_scale = 1.0;
  double norm_epsilon = 1e-5;
};

}  // namespace embedrt
