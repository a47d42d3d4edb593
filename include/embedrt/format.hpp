// Vocabulary of the .embt format (docs/FORMAT.md): data types, table roles, metadata.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace embedrt {

// The newest version this reader implements; it reads every 1.x and 2.x file (FORMAT.md section 8).
// 1.1 adds token.scale and padding-aware positions (position.padding_id); 1.2 adds named outputs
// (several per file), per-token output shapes, the out-of-range id rule and pooling defaults; 2.0
// adds the int32 dtype and id maps (ids.map), which a 1.x reader would misread or refuse.
// Files are written with the lowest version that expresses them.
inline constexpr std::uint16_t kFormatVersionMajor = 2;
inline constexpr std::uint16_t kFormatVersionMinor = 0;
inline constexpr std::uint16_t kOldestVersionMajor = 1;

struct FormatVersion {
  std::uint16_t major = 1, minor = 0;
  auto operator<=>(const FormatVersion&) const = default;
};
inline constexpr std::size_t kTableAlignment = 4096;  // every table starts on a page
inline constexpr std::size_t kRowAlignment = 64;      // every row starts on a cache line
inline constexpr std::size_t kMaxNameBytes = 63;
inline constexpr std::uint64_t kMaxDim = std::uint64_t{1} << 24;

enum class DType : std::uint32_t {
  kF32 = 1,
  kF16 = 2,
  kBF16 = 3,
  kInt8Rowwise = 4,  // int8 codes with a per-row f32 scale and bias stored in the row
  kInt32 = 5,        // 2.0: signed 32-bit integers (an id map), never gathered as embedding rows
  kInt4Rowwise = 6,  // 2.0: 4-bit codes, two a byte, with a per-row f16 scale and bias stored in the row
};

// Tables of values an output computes with (every dtype but int32).
bool is_value_dtype(DType dtype) noexcept;
// The lowest format version a table of this dtype needs (int32: 2.0).
FormatVersion dtype_version(DType dtype) noexcept;

enum class Role : std::uint32_t {
  kOther = 0,
  kToken = 1,
  kPosition = 2,
  kSegment = 3,
  kNormWeight = 4,
  kNormBias = 5,
};

enum class PositionKind { kNone, kLearned, kSinusoidal };

// 1.2: what an output does with an id outside its token table (FORMAT.md section 7).
enum class OutOfRangeIds {
  kRefuse,  // the request is refused, naming the id (the default)
  kRowZero, // the id reads row 0 (Gemma 3n's per-layer table: ids past it, and negative ones)
};

// 1.2: how a bag of rows is pooled into one vector by default (FORMAT.md section 7).
enum class PoolingMode { kNone, kSum, kMean, kMax };

// Names as written in the CLI, metadata and messages ("f32", "token", "learned").
std::string_view dtype_name(DType dtype) noexcept;
std::string_view role_name(Role role) noexcept;
std::string_view position_kind_name(PositionKind kind) noexcept;
std::string_view out_of_range_ids_name(OutOfRangeIds rule) noexcept;  // "refuse", "row0"
std::string_view pooling_mode_name(PoolingMode mode) noexcept;        // "none", "sum", "mean", "max"
std::optional<DType> parse_dtype(std::string_view name) noexcept;
std::optional<Role> parse_role(std::string_view name) noexcept;
std::optional<PositionKind> parse_position_kind(std::string_view name) noexcept;
std::optional<OutOfRangeIds> parse_out_of_range_ids(std::string_view name) noexcept;
std::optional<PoolingMode> parse_pooling_mode(std::string_view name) noexcept;

// Output names (FORMAT.md 5): 1 to 63 bytes of [a-z0-9_], so they can be part of a metadata key.
bool is_valid_output_name(std::string_view name) noexcept;

// Table names and string metadata must be well-formed UTF-8 (FORMAT.md 4 and 5).
bool is_valid_utf8(std::string_view text) noexcept;
// `text` with every byte that is not part of well-formed UTF-8 replaced by U+FFFD.
std::string to_valid_utf8(std::string_view text);

// Bytes of payload in one row (FORMAT.md 4.2), and the row stride a writer uses for it.
std::uint64_t row_bytes(DType dtype, std::uint64_t dim) noexcept;
// Byte offset of an int8_rowwise row's f32 scale (its bias follows): align_up(dim, 4).
std::uint64_t int8_params_offset(std::uint64_t dim) noexcept;
// Byte offset of an int4_rowwise row's f16 scale (its f16 bias follows): align_up(ceil(dim / 2), 4).
std::uint64_t int4_params_offset(std::uint64_t dim) noexcept;
// The offset of a quantized row's scale and bias for its dtype (the two above), 0 for other dtypes.
std::uint64_t row_params_offset(DType dtype, std::uint64_t dim) noexcept;
std::uint64_t default_row_stride(DType dtype, std::uint64_t dim) noexcept;

// A metadata value of one of the record types (FORMAT.md section 5): u64, i64, f64, string.
using MetadataValue = std::variant<std::uint64_t, std::int64_t, double, std::string>;

// How one output of a model is computed (FORMAT.md section 7). The primary output's tables are
// found by their roles; every other output names its tables (the *_table fields).
struct OutputRules {
  std::string name = "embeddings";  // 1.2: output.name / the N of outputs.N.*
  std::string token_table, position_table, segment_table, norm_weight_table, norm_bias_table;  // other outputs only
  std::uint64_t context_length = 0;
  std::uint64_t position_offset = 0;
  PositionKind position_kind = PositionKind::kNone;  // the primary output's (other outputs: none or learned)
  double token_scale = 1.0;    // 1.1: multiplies the token row before any addition (Gemma, BART)
  double output_scale = 1.0;   // multiplies the sum before LayerNorm
  double norm_epsilon = 1e-5;
  // 1.1: tokens with this id are padding: they take position row position_offset - 1 and do not
  // advance the position of the tokens after them (RoBERTa, XLM-R, MPNet). -1: no such rule.
  std::int64_t padding_id = -1;
  // 1.2: the shape of one token's output (Gemma 3n's per-layer inputs: {30, 256}); its product is
  // the token table's dim. Empty: {dim}.
  std::vector<std::uint64_t> shape;
  OutOfRangeIds out_of_range = OutOfRangeIds::kRefuse;  // 1.2
  PoolingMode pooling = PoolingMode::kNone;  // 1.2: the default of a bag request
  bool normalize = false;                    // 1.2: L2-normalize pooled vectors by default
  std::string pooling_weights_table;         // 1.2: an f32 [1, vocab] table of per-id weights
  // 2.0: an int32 [1, vocab] table: id i reads token row map[i] (model2vec's vocabulary quantization).
  std::string id_map_table;

  // The lowest format version that expresses these rules.
  FormatVersion required_version() const noexcept;
};

// The rules of an output as the metadata keys and values a writer stores for them (FORMAT.md 5),
// in the writer's order: for the primary output its own keys ("token.scale"; the 1.0 keys always,
// newer ones when not at their default), for another output the keys under "outputs.<name>."
// ("token", "shape"), each only when not at its default.
std::vector<std::pair<std::string, MetadataValue>> output_rule_values(const OutputRules& rules, bool primary);

// Typed model metadata (FORMAT.md section 5): the file's provenance, the primary output's rules
// (the base: `metadata.position_offset` is the primary output's), and the other outputs.
struct Metadata : OutputRules {
  std::string family = "custom";
  std::string source_files;  // one per line
  std::string source_dtype;
  std::vector<OutputRules> outputs;  // 1.2: the outputs after the primary one, in file order
  // Every other key, kept as read (provenance: recipe.*, config.*, source.*; keys of newer minors).
  std::map<std::string, MetadataValue, std::less<>> extra;

  const OutputRules& primary() const noexcept { return *this; }
  // The lowest format version that expresses this metadata (the tables' dtypes may need more).
  FormatVersion required_version() const noexcept;
};

}  // namespace embedrt
