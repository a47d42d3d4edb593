#include "embedrt/format.hpp"

#include <algorithm>

#include "byte_io.hpp"
#include "layout.hpp"
#include "utf8.hpp"

namespace embedrt {

std::string_view dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kInt8Rowwise: return "int8";
    case DType::kInt32: return "int32";
    case DType::kInt4Rowwise: return "int4";
  }
  return "unknown";
}

bool is_value_dtype(DType dtype) noexcept { return dtype != DType::kInt32; }

FormatVersion dtype_version(DType dtype) noexcept {
  return dtype == DType::kInt32 || dtype == DType::kInt4Rowwise ? FormatVersion{2, 0} : FormatVersion{1, 0};
}

bool is_valid_utf8(std::string_view text) noexcept { return detail::valid_utf8(text); }

std::string to_valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    // The longest well-formed sequence starting here (1 to 4 bytes), else one replaced byte.
    std::size_t len = 0;
    for (std::size_t k = 1; k <= 4 && i + k <= text.size(); ++k) {
      if (detail::valid_utf8(text.substr(i, k))) {
        len = k;
        break;
      }
    }
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  return out;
}

std::string_view role_name(Role role) noexcept {
  switch (role) {
    case Role::kOther: return "other";
    case Role::kToken: return "token";
    case Role::kPosition: return "position";
    case Role::kSegment: return "segment";
    case Role::kNormWeight: return "norm_weight";
    case Role::kNormBias: return "norm_bias";
  }
  return "other";
}

std::string_view position_kind_name(PositionKind kind) noexcept {
  switch (kind) {
    case PositionKind::kNone: return "none";
    case PositionKind::kLearned: return "learned";
    case PositionKind::kSinusoidal: return "sinusoidal";
  }
  return "none";
}

std::string_view out_of_range_ids_name(OutOfRangeIds rule) noexcept {
  switch (rule) {
    case OutOfRangeIds::kRefuse: return "refuse";
    case OutOfRangeIds::kRowZero: return "row0";
  }
  return "refuse";
}

std::string_view pooling_mode_name(PoolingMode mode) noexcept {
  switch (mode) {
    case PoolingMode::kNone: return "none";
    case PoolingMode::kSum: return "sum";
    case PoolingMode::kMean: return "mean";
    case PoolingMode::kMax: return "max";
  }
  return "none";
}

std::optional<OutOfRangeIds> parse_out_of_range_ids(std::string_view name) noexcept {
  for (OutOfRangeIds r : {OutOfRangeIds::kRefuse, OutOfRangeIds::kRowZero}) {
    if (name == out_of_range_ids_name(r)) return r;
  }
  return std::nullopt;
}

std::optional<PoolingMode> parse_pooling_mode(std::string_view name) noexcept {
  for (PoolingMode m : {PoolingMode::kNone, PoolingMode::kSum, PoolingMode::kMean, PoolingMode::kMax}) {
    if (name == pooling_mode_name(m)) return m;
  }
  return std::nullopt;
}

bool is_valid_output_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

FormatVersion OutputRules::required_version() const noexcept {
  if (!id_map_table.empty()) return {2, 0};
  if (name != "embeddings" || !shape.empty() || out_of_range != OutOfRangeIds::kRefuse ||
      pooling != PoolingMode::kNone || normalize || !pooling_weights_table.empty()) {
    return {1, 2};
  }
  return {1, static_cast<std::uint16_t>(token_scale != 1.0 || padding_id >= 0 ? 1 : 0)};
}

FormatVersion Metadata::required_version() const noexcept {
  FormatVersion v = OutputRules::required_version();
  for (const OutputRules& o : outputs) v = std::max(v, std::max(o.required_version(), FormatVersion{1, 2}));
  return v;
}

std::optional<DType> parse_dtype(std::string_view name) noexcept {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kInt8Rowwise, DType::kInt32, DType::kInt4Rowwise}) {
    if (name == dtype_name(d)) return d;
  }
  return std::nullopt;
}

std::optional<Role> parse_role(std::string_view name) noexcept {
  for (Role r : {Role::kOther, Role::kToken, Role::kPosition, Role::kSegment, Role::kNormWeight,
                 Role::kNormBias}) {
    if (name == role_name(r)) return r;
  }
  return std::nullopt;
}

std::optional<PositionKind> parse_position_kind(std::string_view name) noexcept {
  for (PositionKind k : {PositionKind::kNone, PositionKind::kLearned, PositionKind::kSinusoidal}) {
    if (name == position_kind_name(k)) return k;
  }
  return std::nullopt;
}

std::uint64_t row_bytes(DType dtype, std::uint64_t dim) noexcept { return detail::row::bytes(dtype, dim); }

std::uint64_t int8_params_offset(std::uint64_t dim) noexcept {
  return detail::row::params_offset(DType::kInt8Rowwise, dim);
}
std::uint64_t int4_params_offset(std::uint64_t dim) noexcept {
  return detail::row::params_offset(DType::kInt4Rowwise, dim);
}

std::uint64_t row_params_offset(DType dtype, std::uint64_t dim) noexcept {
  return detail::row::params_offset(dtype, dim);
}

std::uint64_t default_row_stride(DType dtype, std::uint64_t dim) noexcept {
  return detail::align_up(row_bytes(dtype, dim), kRowAlignment);
}

}  // namespace embedrt
