#include "synthetic_model.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <vector>

#include "embedrt/half.hpp"
#include "embedrt/table_file_writer.hpp"

namespace embedrt::perf {
namespace {

// A fast, seedable stream of uniform floats in [-range, range): one per element of a row.
struct Random {
  std::uint64_t state;
  float next(float range) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (static_cast<float>(state >> 40) / static_cast<float>(1u << 24) * 2.0f - 1.0f) * range;
  }
};

void fill_row(std::span<std::byte> row, DType dtype, std::uint64_t dim, std::uint64_t seed, float range) {
  Random random{seed * 0x9e3779b97f4a7c15ull + 1};
  switch (dtype) {
    case DType::kF32:
      for (std::uint64_t j = 0; j < dim; ++j) {
        const float v = random.next(range);
        std::memcpy(row.data() + 4 * j, &v, 4);
      }
      break;
    case DType::kF16:
    case DType::kBF16:
      for (std::uint64_t j = 0; j < dim; ++j) {
        const float v = random.next(range);
        const std::uint16_t h = dtype == DType::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
        std::memcpy(row.data() + 2 * j, &h, 2);
      }
      break;
    case DType::kInt8Rowwise: {
      for (std::uint64_t j = 0; j < dim; ++j) row[j] = static_cast<std::byte>(static_cast<std::int8_t>(random.next(127.0f)));
      const float scale = range / 127.0f, bias = 0.0f;
      std::memcpy(row.data() + int8_params_offset(dim), &scale, 4);
      std::memcpy(row.data() + int8_params_offset(dim) + 4, &bias, 4);
      break;
    }
    case DType::kInt4Rowwise: {  // codes 0..15 around a zero midpoint: v = code * scale + bias
      for (std::uint64_t j = 0; j < dim; j += 2) {
        const auto lo = static_cast<unsigned>(random.next(8.0f) + 8.0f) & 15u;
        const auto hi = j + 1 < dim ? static_cast<unsigned>(random.next(8.0f) + 8.0f) & 15u : 0u;
        row[j / 2] = static_cast<std::byte>(lo | hi << 4);
      }
      const std::uint16_t scale = f32_to_f16(range / 8.0f), bias = f32_to_f16(-range);
      std::memcpy(row.data() + int4_params_offset(dim), &scale, 2);
      std::memcpy(row.data() + int4_params_offset(dim) + 2, &bias, 2);
      break;
    }
    case DType::kInt32: break;  // an id map, never a generated value table
  }
}

}  // namespace

std::string SyntheticSpec::describe() const {
  std::string text = std::to_string(vocab) + "x" + std::to_string(dim) + " " + std::string(dtype_name(dtype));
  if (positions) text += ", " + std::to_string(positions) + " positions";
  if (segments) text += ", " + std::to_string(segments) + " segments";
  if (layer_norm) text += ", LayerNorm";
  if (token_scale != 1.0) text += ", token scale " + std::to_string(token_scale);
  if (extra.vocab) {
    text += ", output " + extra.name + " " + std::to_string(extra.vocab) + "x" + std::to_string(extra.dim);
    if (extra.token_scale != 1.0) text += " scale " + std::to_string(extra.token_scale);
    if (extra.out_of_range == OutOfRangeIds::kRowZero) text += " ids past it row 0";
  }
  return text;
}

Status gemma3n_spec(const std::string& variant, SyntheticSpec& spec) {
  std::uint64_t hidden = 0, layers = 0;
  if (variant == "e2b") {
    hidden = 2048, layers = 30;
  } else if (variant == "e4b") {
    hidden = 2560, layers = 35;
  } else {
    return Error(ErrorCode::kInvalidArgument, "--synthetic-gemma3n '" + variant + "': expected e2b or e4b");
  }
  constexpr std::uint64_t kPerLayer = 256;  // hidden_size_per_layer_input
  const auto bf16 = [](double v) { return static_cast<double>(bf16_to_f32(f32_to_bf16(static_cast<float>(v)))); };
  spec = SyntheticSpec{};
  spec.vocab = 262400;
  spec.dim = hidden;
  spec.dtype = DType::kBF16;
  spec.token_scale = bf16(std::sqrt(static_cast<double>(hidden)));
  spec.extra.vocab = 262144;  // vocab_size_per_layer_input
  spec.extra.dim = layers * kPerLayer;
  spec.extra.token_scale = bf16(std::sqrt(static_cast<double>(kPerLayer)));
  spec.extra.shape = {layers, kPerLayer};
  spec.extra.out_of_range = OutOfRangeIds::kRowZero;
  return {};
}

Status parse_shape(const std::string& text, SyntheticSpec& spec) {
  const auto x = text.find('x');
  const auto number = [&](std::size_t begin, std::size_t end, std::uint64_t& out) {
    const auto [ptr, ec] = std::from_chars(text.data() + begin, text.data() + end, out);
    return begin < end && ec == std::errc() && ptr == text.data() + end && out > 0;
  };
  if (x == std::string::npos || !number(0, x, spec.vocab) || !number(x + 1, text.size(), spec.dim)) {
    return Error(ErrorCode::kInvalidArgument, "--synthetic '" + text + "': expected VOCABxDIM, e.g. 50257x768");
  }
  if (spec.dim > kMaxDim) {
    return Error(ErrorCode::kInvalidArgument, "--synthetic '" + text + "': dim is past " + std::to_string(kMaxDim));
  }
  return {};
}

Status write_synthetic_model(const std::string& path, const SyntheticSpec& spec) {
  std::vector<TableSpec> tables = {{"token", Role::kToken, spec.dtype, spec.vocab, spec.dim}};
  Metadata meta;
  meta.family = "synthetic";
  meta.token_scale = spec.token_scale;
  if (spec.positions) {
    tables.push_back({"position", Role::kPosition, spec.dtype, spec.positions, spec.dim});
    meta.position_kind = PositionKind::kLearned;
    meta.context_length = spec.positions;
  }
  if (spec.segments) tables.push_back({"segment", Role::kSegment, spec.dtype, spec.segments, spec.dim});
  if (spec.extra.vocab) {
    tables.push_back({spec.extra.name, Role::kOther, spec.dtype, spec.extra.vocab, spec.extra.dim});
    OutputRules rules;
    rules.name = spec.extra.name;
    rules.token_table = spec.extra.name;
    rules.token_scale = spec.extra.token_scale;
    rules.shape = spec.extra.shape;
    rules.out_of_range = spec.extra.out_of_range;
    meta.outputs.push_back(std::move(rules));
  }
  if (spec.layer_norm) {
    tables.push_back({"norm_weight", Role::kNormWeight, DType::kF32, 1, spec.dim});
    tables.push_back({"norm_bias", Role::kNormBias, DType::kF32, 1, spec.dim});
    meta.norm_epsilon = 1e-12;
  }
  auto writer = TableFileWriter::begin(path, tables, meta, {.overwrite = true, .sync = false});
  if (!writer) return std::move(writer).error();
  for (std::size_t t = 0; t < tables.size(); ++t) {
    const TableSpec& s = tables[t];
    if (s.role == Role::kNormWeight || s.role == Role::kNormBias) {
      auto row = writer->row_f32(t, 0);
      for (float& v : row) v = s.role == Role::kNormWeight ? 1.0f : 0.0f;
      continue;
    }
    // Token rows about +-0.05, positions smaller: the range of GPT-2's and BERT's tables.
    const float range = s.role == Role::kToken || s.role == Role::kOther ? 0.05f : 0.01f;
    tbb::parallel_for(tbb::blocked_range<std::uint64_t>(0, s.rows, 4096), [&](const tbb::blocked_range<std::uint64_t>& r) {
      for (std::uint64_t row = r.begin(); row < r.end(); ++row) {
        fill_row(writer->row(t, row), s.dtype, s.dim, (t << 40) + row, range);
      }
    });
  }
  return writer->commit();
}

Status matches(const Model& model, const SyntheticSpec& spec) {
  const auto differs = [&](const std::string& what) {
    return Error(ErrorCode::kInvalidArgument, "'" + model.file().path() + "' is not the model --synthetic " +
                                                  spec.describe() + " asks for (" + what +
                                                  "); remove it or name another --synthetic-file");
  };
  if (model.vocab_size() != spec.vocab || model.dim() != spec.dim) {
    return differs("it is " + std::to_string(model.vocab_size()) + "x" + std::to_string(model.dim()));
  }
  if (model.token().dtype != spec.dtype) return differs("its table is " + std::string(dtype_name(model.token().dtype)));
  const std::uint64_t positions = model.position() ? model.position()->rows : 0;
  const std::uint64_t segments = model.segment() ? model.segment()->rows : 0;
  if (positions != spec.positions) return differs("it has " + std::to_string(positions) + " positions");
  if (segments != spec.segments) return differs("it has " + std::to_string(segments) + " segments");
  if ((model.norm_weight() != nullptr) != spec.layer_norm) return differs("LayerNorm differs");
  if (model.metadata().token_scale != spec.token_scale) return differs("its token scale differs");
  const auto outputs = model.outputs();
  if (outputs.size() != (spec.extra.vocab ? 2u : 1u)) return differs("it has " + std::to_string(outputs.size()) + " outputs");
  if (spec.extra.vocab) {
    const OutputInfo& o = outputs[1];
    if (o.name != spec.extra.name || o.token->rows != spec.extra.vocab || o.dim() != spec.extra.dim ||
        o.token->dtype != spec.dtype || o.rules->token_scale != spec.extra.token_scale ||
        o.rules->out_of_range != spec.extra.out_of_range) {
      return differs("its output '" + o.name + "' differs");
    }
  }
  return {};
}

}  // namespace embedrt::perf
