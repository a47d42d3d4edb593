// Vocabulary of the .embt format (docs/FORMAT.md): data types, table roles, metadata.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace embedrt {

inline constexpr std::uint16_t kFormatVersionMajor = 1;
// 1.1 adds token.scale and padding-aware positions (position.padding_id); files that use
// neither are written as 1.0 (FORMAT.md section 8: the lowest version that expresses the file).
inline constexpr std::uint16_t kFormatVersionMinor = 1;
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

// Table names and string metadata must be well-formed UTF-8 (FORMAT.md 4 and 5).
bool is_valid_utf8(std::string_view text) noexcept;
// `text` with every byte that is not part of well-formed UTF-8 replaced by U+FFFD.
std::string to_valid_utf8(std::string_view text);

// Bytes of payload in one row (FORMAT.md 4.2), and the row stride a writer uses for it.
std::uint64_t row_bytes(DType dtype, std::uint64_t dim) noexcept;
// Byte offset of an int8_rowwise row's f32 scale (its bias follows): align_up(dim, 4).
std::uint64_t int8_params_offset(std::uint64_t dim) noexcept;
std::uint64_t default_row_stride(DType dtype, std::uint64_t dim) noexcept;

// A metadata value of one of the record types (FORMAT.md section 5): u64, i64, f64, string.
using MetadataValue = std::variant<std::uint64_t, std::int64_t, double, std::string>;

// Typed model metadata (FORMAT.md section 5).
struct Metadata {
  std::string family = "custom";
  std::string source_files;  // one per line
  std::string source_dtype;
  std::uint64_t context_length = 0;
  std::uint64_t position_offset = 0;
  PositionKind position_kind = PositionKind::kNone;
  double token_scale = 1.0;    // 1.1: multiplies the token row before any addition (Gemma, BART)
  double output_scale = 1.0;   // multiplies the sum before LayerNorm
  double norm_epsilon = 1e-5;
  // 1.1: tokens with this id are padding: they take position row position_offset - 1 and do not
  // advance the position of the tokens after them (RoBERTa, XLM-R, MPNet). -1: no such rule.
  std::int64_t padding_id = -1;
  // Every other key, kept as read (provenance: recipe.*, config.*, source.*; keys of newer minors).
  std::map<std::string, MetadataValue, std::less<>> extra;

  // The lowest format minor version that expresses this metadata.
  std::uint16_t required_minor() const noexcept {
    return token_scale != 1.0 || padding_id >= 0 ? 1 : 0;
  }
};

}  // namespace embedrt
