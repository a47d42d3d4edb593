#include "embedrt/import.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "embedrt/table_file_writer.hpp"
#include "embedrt/half.hpp"
#include "embedrt/mapped_file.hpp"
#include "recipe_table.hpp"

namespace embedrt::import {
namespace {

// One source row as float (exact for f32/f16/bf16; f64 rounds to nearest float, as torch does).
void read_row(const SourceTensor& t, std::uint64_t row, std::uint64_t dim, double* out) {
  const std::size_t element = source_dtype_size(t.dtype);
  const bool vector = t.shape.size() == 1;
  const std::int64_t row_stride = vector ? 0 : t.strides[0];
  const std::int64_t column_stride = t.strides.back();
  const std::byte* base = t.storage.data() + (static_cast<std::uint64_t>(t.storage_offset) +
                                              row * static_cast<std::uint64_t>(row_stride)) * element;
  for (std::uint64_t j = 0; j < dim; ++j) {
    const std::byte* p = base + j * static_cast<std::uint64_t>(column_stride) * element;
    switch (t.dtype) {
      case SourceDType::kF64: { double v; std::memcpy(&v, p, 8); out[j] = v; break; }
      case SourceDType::kF32: { float v; std::memcpy(&v, p, 4); out[j] = v; break; }
      case SourceDType::kF16: { std::uint16_t v; std::memcpy(&v, p, 2); out[j] = f16_to_f32(v); break; }
      case SourceDType::kBF16: { std::uint16_t v; std::memcpy(&v, p, 2); out[j] = bf16_to_f32(v); break; }
      // Integers (id maps) are exact in double up to 2^53.
      case SourceDType::kI32: { std::int32_t v; std::memcpy(&v, p, 4); out[j] = v; break; }
      case SourceDType::kI64: { std::int64_t v; std::memcpy(&v, p, 8); out[j] = static_cast<double>(v); break; }
      default: out[j] = 0; break;  // refused earlier by plan_model
    }
  }
}

// The source dtype matches the output and the row is contiguous: copy bytes (bit-exact, fast).
bool direct_copy(const SourceTensor& t, DType out) {
  const bool same = (t.dtype == SourceDType::kF32 && out == DType::kF32) ||
                    (t.dtype == SourceDType::kF16 && out == DType::kF16) ||
                    (t.dtype == SourceDType::kBF16 && out == DType::kBF16);
  return same && t.strides.back() == 1;
}

struct ErrorStats {
  double max = 0, sum = 0, squares = 0;
  std::uint64_t count = 0;
  bool exact = true;
  void add(double source, double stored) {
    const double e = std::fabs(stored - source);
    if (std::isnan(source) && std::isnan(stored)) return;
    if (std::isinf(source) && source == stored) return;
    if (!(e == 0)) exact = false;
    max = std::max(max, e);
    sum += e;
    squares += e * e;
    ++count;
  }
};

// Quantizes one row to int8 codes with a float scale and bias: value = q * scale + bias.
Status quantize_row(const double* values, std::uint64_t dim, std::byte* out, const std::string& name,
                    std::uint64_t row, ErrorStats& stats) {
  double lo = values[0], hi = values[0];
  for (std::uint64_t j = 0; j < dim; ++j) {
    if (!std::isfinite(values[j])) {
      return Error(ErrorCode::kInvalidArgument, "tensor '" + name + "' row " + std::to_string(row) + " holds " +
                                                    std::to_string(values[j]) + ", which int8 cannot represent");
    }
    lo = std::min(lo, values[j]);
    hi = std::max(hi, values[j]);
  }
  const float scale = static_cast<float>((hi - lo) / 255.0);
  const float bias = static_cast<float>(lo) + 128.0f * scale;
  const std::uint64_t tail = int8_params_offset(dim);
  for (std::uint64_t j = 0; j < dim; ++j) {
    const double q = scale > 0 ? std::nearbyint((values[j] - bias) / scale) : 0.0;
    const auto code = static_cast<std::int8_t>(std::clamp(q, -128.0, 127.0));
    out[j] = static_cast<std::byte>(code);
    stats.add(values[j], static_cast<double>(static_cast<float>(code) * scale + bias));
  }
  std::memcpy(out + tail, &scale, 4);
  std::memcpy(out + tail + 4, &bias, 4);
  return {};
}

// Quantizes one row to 4-bit codes with an f16 scale and bias (FORMAT.md 4.2): value =
// code * scale + bias, code in [0, 15], the scale and bias rounded to f16 before the codes are
// chosen, so the codes fit the parameters the kernels will read.
Status quantize_row4(const double* values, std::uint64_t dim, std::byte* out, const std::string& name,
                     std::uint64_t row, ErrorStats& stats) {
  double lo = values[0], hi = values[0];
  for (std::uint64_t j = 0; j < dim; ++j) {
    if (!std::isfinite(values[j])) {
      return Error(ErrorCode::kInvalidArgument, "tensor '" + name + "' row " + std::to_string(row) + " holds " +
                                                    std::to_string(values[j]) + ", which int4 cannot represent");
    }
    lo = std::min(lo, values[j]);
    hi = std::max(hi, values[j]);
  }
  const std::uint16_t scale_bits = f32_to_f16(static_cast<float>((hi - lo) / 15.0));
  const std::uint16_t bias_bits = f32_to_f16(static_cast<float>(lo));
  const float scale = f16_to_f32(scale_bits), bias = f16_to_f32(bias_bits);
  if (!std::isfinite(scale) || !std::isfinite(bias)) {
    return Error(ErrorCode::kOutOfRange, "tensor '" + name + "' row " + std::to_string(row) +
                                             " spans values beyond f16's range, which int4's scale and bias use");
  }
  for (std::uint64_t j = 0; j < dim; ++j) {
    const double q = scale > 0 ? std::nearbyint((values[j] - bias) / scale) : 0.0;
    const auto code = static_cast<unsigned>(std::clamp(q, 0.0, 15.0));
    out[j / 2] |= static_cast<std::byte>(j % 2 ? code << 4 : code);
    stats.add(values[j], static_cast<double>(static_cast<float>(code) * scale + bias));
  }
  const std::uint64_t tail = int4_params_offset(dim);
  std::memcpy(out + tail, &scale_bits, 2);
  std::memcpy(out + tail + 2, &bias_bits, 2);
  return {};
}

// Row `p` of the original Transformer's fixed encoding, in double: sin on even dims, cos on odd,
// at angle p / 10000^(2i / dim).
void sinusoid_row(std::uint64_t p, std::uint64_t dim, double* out) {
  for (std::uint64_t j = 0; j < dim; ++j) {
    const double angle = static_cast<double>(p) / std::pow(10000.0, static_cast<double>(j - j % 2) / static_cast<double>(dim));
    out[j] = j % 2 == 0 ? std::sin(angle) : std::cos(angle);
  }
}

// Encodes one row of values in the table dtype, recording the rounding error.
Status encode_row(const double* values, std::uint64_t dim, DType dtype, std::span<std::byte> out, const std::string& name,
                  std::uint64_t row, ErrorStats& stats, bool allow_overflow) {
  // A finite value that became infinite in the table dtype: refused unless asked for.
  const auto overflowed = [&](std::uint64_t j, double stored) -> Status {
    if (allow_overflow || !std::isfinite(values[j]) || std::isfinite(stored)) return {};
    char value[32];
    std::snprintf(value, sizeof value, "%.9g", values[j]);
    return Error(ErrorCode::kOutOfRange,
                 "tensor '" + name + "' row " + std::to_string(row) + " column " + std::to_string(j) + " holds " + value +
                     ", beyond the range of " + std::string(dtype_name(dtype)) +
                     " (it would become infinity); choose another table `dtype` or allow the overflow (`allow_overflow`)",
                 {.tensor = name, .field = "dtype"});
  };
  switch (dtype) {
    case DType::kF32:
      for (std::uint64_t j = 0; j < dim; ++j) {
        const float v = static_cast<float>(values[j]);
        if (Status s = overflowed(j, v); !s) return s;
        std::memcpy(out.data() + 4 * j, &v, 4);
        stats.add(values[j], v);
      }
      return {};
    case DType::kF16:
      for (std::uint64_t j = 0; j < dim; ++j) {
        const std::uint16_t h = f32_to_f16(static_cast<float>(values[j]));
        if (Status s = overflowed(j, f16_to_f32(h)); !s) return s;
        std::memcpy(out.data() + 2 * j, &h, 2);
        stats.add(values[j], f16_to_f32(h));
      }
      return {};
    case DType::kBF16:
      for (std::uint64_t j = 0; j < dim; ++j) {
        const std::uint16_t h = f32_to_bf16(static_cast<float>(values[j]));
        if (Status s = overflowed(j, bf16_to_f32(h)); !s) return s;
        std::memcpy(out.data() + 2 * j, &h, 2);
        stats.add(values[j], bf16_to_f32(h));
      }
      return {};
    case DType::kInt8Rowwise:
      return quantize_row(values, dim, out.data(), name, row, stats);
    case DType::kInt4Rowwise:
      return quantize_row4(values, dim, out.data(), name, row, stats);
    case DType::kInt32:
      // An id map's entries are rows: integers in [0, 2^31).
      for (std::uint64_t j = 0; j < dim; ++j) {
        if (!(values[j] >= 0 && values[j] < 2147483648.0 && values[j] == std::floor(values[j]))) {
          return Error(ErrorCode::kInvalidArgument, "tensor '" + name + "' entry " + std::to_string(j) + " is " +
                                                        std::to_string(values[j]) + ", not a row index");
        }
        const auto v = static_cast<std::int32_t>(values[j]);
        std::memcpy(out.data() + 4 * j, &v, 4);
      }
      return {};
  }
  return {};
}


// A tensor name as a table name (FORMAT.md 4: 1-63 bytes of UTF-8): hostile bytes replaced,
// and long names keep their last 63 bytes, cut at a character boundary.
std::string table_name(const std::string& tensor) {
  std::string name = to_valid_utf8(tensor);
  if (name.size() <= kMaxNameBytes) return name;
  std::size_t cut = name.size() - kMaxNameBytes;
  while (cut < name.size() && (static_cast<unsigned char>(name[cut]) & 0xc0) == 0x80) ++cut;
  return name.substr(cut);
}

}  // namespace

Result<std::vector<TableReport>> convert_model(const ModelPlan& plan, const std::string& output,
                                               const ConvertOptions& options, const ProgressFn& progress) {
  const DType dtype = table_dtype(plan, options);
  std::vector<TableSpec> specs;
  std::uint64_t total_bytes = 0;
  const ChosenTable& token = plan.tables[0];
  const std::uint64_t model_dim = static_cast<std::uint64_t>(token.projection ? token.projection->shape[0]
                                                                              : token.tensor->shape.back());
  for (const ChosenTable& c : plan.tables) {
    const SourceTensor& t = *c.tensor;
    // LayerNorm rows and pooling weights stay f32 (FORMAT.md 7).
    const bool norm = c.role == Role::kNormWeight || c.role == Role::kNormBias;
    const auto rows = norm ? 1 : static_cast<std::uint64_t>(t.shape[0]);
    const auto dim = c.projection ? static_cast<std::uint64_t>(c.projection->shape[0]) : static_cast<std::uint64_t>(t.shape.back());
    const DType table_dtype = c.use == ChosenTable::Use::kIdMap ? DType::kInt32
                              : norm || c.use == ChosenTable::Use::kPoolingWeights ? DType::kF32 : dtype;
    specs.push_back({table_name(t.name), c.role, table_dtype, rows, dim});
    total_bytes += rows * static_cast<std::uint64_t>(t.shape.back()) * source_dtype_size(t.dtype);
  }
  if (plan.sinusoidal_context > 0) {
    specs.push_back({"sinusoidal_positions", Role::kPosition, dtype, plan.sinusoidal_context, model_dim});
    total_bytes += plan.sinusoidal_context * model_dim * 8;
  }
  Metadata metadata = plan.metadata;
  // Provenance quotes file and tensor names from the input: kept readable, made valid UTF-8.
  metadata.source_files = to_valid_utf8(metadata.source_files);
  for (auto& [key, value] : metadata.extra) {
    if (auto* text = std::get_if<std::string>(&value)) *text = to_valid_utf8(*text);
  }
  // Each output's token scale, rounded for the table dtype chosen; the tables of outputs after
  // the primary one are named in their rules.
  for (std::size_t k = 0; k < plan.token_scales.size(); ++k) {
    if (plan.token_scales[k].rounding == ScaleRounding::kNone) continue;
    OutputRules& rules = k == 0 ? static_cast<OutputRules&>(metadata) : metadata.outputs[k - 1];
    rules.token_scale = applied_token_scale(plan, k, dtype);
    metadata.extra[k == 0 ? "recipe.token_scale" : "recipe.outputs." + rules.name + ".token_scale"] =
        describe_token_scale(plan, k, dtype);
  }
  for (std::size_t i = 0; i < plan.tables.size(); ++i) {
    const ChosenTable& c = plan.tables[i];
    OutputRules& rules = c.output == 0 ? static_cast<OutputRules&>(metadata) : metadata.outputs[c.output - 1];
    if (c.use == ChosenTable::Use::kPoolingWeights) {
      rules.pooling_weights_table = specs[i].name;
    } else if (c.use == ChosenTable::Use::kIdMap) {
      rules.id_map_table = specs[i].name;
    } else if (c.output != 0) {
      rules.token_table = specs[i].name;
    }
  }
  auto writer = TableFileWriter::begin(output, specs, metadata, {.overwrite = options.overwrite, .sync = options.sync});
  if (!writer) return std::move(writer).error();

  std::vector<TableReport> reports;
  std::uint64_t done = 0, reported = 0;
  constexpr std::uint64_t kReleaseEvery = 32u << 20;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    // Tables past the chosen ones are generated (sinusoidal positions).
    const SourceTensor* source = i < plan.tables.size() ? plan.tables[i].tensor : nullptr;
    const SourceTensor* projection = i < plan.tables.size() ? plan.tables[i].projection : nullptr;
    const TableSpec& spec = writer->spec(i);
    const std::uint64_t dim = spec.dim;
    ErrorStats stats;
    std::vector<double> values(dim);
    // A folded projection W [dim, source_dim]: each row becomes W @ row, accumulated in f64.
    const std::uint64_t source_dim = source ? static_cast<std::uint64_t>(source->shape.back()) : dim;
    std::vector<double> matrix, source_row;
    if (projection != nullptr) {
      matrix.resize(dim * source_dim);
      for (std::uint64_t r = 0; r < dim; ++r) read_row(*projection, r, source_dim, matrix.data() + r * source_dim);
      source_row.resize(source_dim);
    }
    const bool copy = source != nullptr && projection == nullptr && direct_copy(*source, spec.dtype);
    const std::size_t source_row_bytes = source_dim * (source ? source_dtype_size(source->dtype) : 8);
    std::uint64_t released_row = 0;
    for (std::uint64_t r = 0; r < spec.rows; ++r) {
      const std::span<std::byte> out = writer->row(i, r);
      if (copy) {
        const SourceTensor& t = *source;
        const std::int64_t row_stride = t.shape.size() == 1 ? 0 : t.strides[0];
        std::memcpy(out.data(), t.storage.data() + (static_cast<std::uint64_t>(t.storage_offset) +
                                                    r * static_cast<std::uint64_t>(row_stride)) * source_dtype_size(t.dtype),
                    source_row_bytes);
      } else {
        if (projection != nullptr) {
          read_row(*source, r, source_dim, source_row.data());
          for (std::uint64_t j = 0; j < dim; ++j) {
            double sum = 0;
            const double* w = matrix.data() + j * source_dim;
            for (std::uint64_t k = 0; k < source_dim; ++k) sum += w[k] * source_row[k];
            values[j] = sum;
          }
        } else if (source != nullptr) {
          read_row(*source, r, dim, values.data());
        } else {
          sinusoid_row(r, dim, values.data());
        }
        if (Status s = encode_row(values.data(), dim, spec.dtype, out, spec.name, r, stats, options.allow_overflow); !s) return std::move(s).error();
      }
      done += source_row_bytes;
      if (done - reported >= kReleaseEvery || r + 1 == spec.rows) {
        reported = done;
        if (progress) progress(done, total_bytes);
        // Contiguous sources only: a strided (transposed) view revisits its pages on every row.
        if (source != nullptr && source->strides.back() == 1 && source->shape.size() == 2) {
          const SourceTensor& t = *source;
          release_resident_pages(writer->row(i, released_row).data(), out.data() + out.size());
          const auto row_bytes = static_cast<std::uint64_t>(t.strides[0]) * source_dtype_size(t.dtype);
          const std::byte* base = t.storage.data() + static_cast<std::uint64_t>(t.storage_offset) * source_dtype_size(t.dtype);
          release_resident_pages(base + released_row * row_bytes, base + (r + 1) * row_bytes);
          released_row = r + 1;
        }
      }
    }
    reports.push_back({source ? source->name : spec.name, spec.role, spec.dtype, spec.rows, dim, copy || stats.exact,
                       stats.max, stats.count ? stats.sum / static_cast<double>(stats.count) : 0.0,
                       stats.count ? std::sqrt(stats.squares / static_cast<double>(stats.count)) : 0.0});
  }
  if (Status s = writer->commit(); !s) return std::move(s).error();
  return reports;
}

}  // namespace embedrt::import
