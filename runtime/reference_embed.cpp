// The reference path: validate everything, then one row at a time, in plain scalar code.
#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>
#include <string>

#include "byte_io.hpp"
#include "embedrt/reference.hpp"
#include "embedrt/half.hpp"

namespace embedrt {

void decode_row(const TableView& table, std::uint64_t row, std::span<float> out) noexcept {
  const std::byte* p = table.row(row);
  const std::uint64_t dim = table.dim;
  switch (table.dtype) {
    case DType::kF32:
      std::memcpy(out.data(), p, dim * sizeof(float));
      return;
    case DType::kF16:
      for (std::uint64_t j = 0; j < dim; ++j) {
        out[j] = f16_to_f32(detail::load_le<std::uint16_t>(p + 2 * j));
      }
      return;
    case DType::kBF16:
      for (std::uint64_t j = 0; j < dim; ++j) {
        out[j] = bf16_to_f32(detail::load_le<std::uint16_t>(p + 2 * j));
      }
      return;
    case DType::kInt32:
      for (std::uint64_t j = 0; j < dim; ++j) out[j] = static_cast<float>(detail::load_le<std::int32_t>(p + 4 * j));
      return;
    case DType::kInt4Rowwise: {
      const std::uint64_t tail = int4_params_offset(dim);
      const float scale = f16_to_f32(detail::load_le<std::uint16_t>(p + tail));
      const float bias = f16_to_f32(detail::load_le<std::uint16_t>(p + tail + 2));
      for (std::uint64_t j = 0; j < dim; ++j) {
        const auto byte = static_cast<unsigned>(p[j / 2]);
        out[j] = static_cast<float>(j % 2 ? byte >> 4 : byte & 0xfu) * scale + bias;
      }
      return;
    }
    case DType::kInt8Rowwise: {
      const std::uint64_t tail = int8_params_offset(dim);
      const float scale = detail::load_le<float>(p + tail);
      const float bias = detail::load_le<float>(p + tail + 4);
      for (std::uint64_t j = 0; j < dim; ++j) {
        out[j] = static_cast<float>(static_cast<std::int8_t>(p[j])) * scale + bias;
      }
      return;
    }
  }
}

namespace {

// LayerNorm in double, rounded once to float: the oracle must be more accurate than what it checks.
void layer_norm(std::span<float> x, const TableView& weight, const TableView* bias, double epsilon) {
  const std::size_t n = x.size();
  double mean = 0;
  for (float v : x) mean += v;
  mean /= static_cast<double>(n);
  double variance = 0;
  for (float v : x) variance += (v - mean) * (v - mean);
  variance /= static_cast<double>(n);
  const double inverse = 1.0 / std::sqrt(variance + epsilon);
  std::vector<float> w(n), b(n, 0.0f);
  decode_row(weight, 0, w);
  if (bias != nullptr) decode_row(*bias, 0, b);
  for (std::size_t j = 0; j < n; ++j) {
    x[j] = static_cast<float>((x[j] - mean) * inverse * w[j] + b[j]);
  }
}

Status check_ids(std::span<const std::int64_t> ids, std::uint64_t length, std::uint64_t limit, const char* what) {
  for (std::uint64_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || static_cast<std::uint64_t>(ids[i]) >= limit) {
      return Error(ErrorCode::kOutOfRange, "sequence " + std::to_string(i / length) + ", position " +
                                               std::to_string(i % length) + ": " + what + " " +
                                               std::to_string(ids[i]) + " is out of range [0, " +
                                               std::to_string(limit) + ")");
    }
  }
  return {};
}

// The token row of each id (through the id map; 0 for an id outside a row-0 output): refused when
// the map points outside the token table.
Result<std::vector<std::uint64_t>> token_rows(const OutputInfo& o, std::span<const std::int64_t> ids) {
  std::vector<std::uint64_t> rows(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const bool outside = ids[i] < 0 || static_cast<std::uint64_t>(ids[i]) >= o.vocab_size();
    const std::int64_t row = o.row_of(outside ? 0 : static_cast<std::uint64_t>(ids[i]));
    if (row < 0 || static_cast<std::uint64_t>(row) >= o.token->rows) {
      return Error(ErrorCode::kMalformed, "ids.map maps id " + std::to_string(ids[i]) + " to row " + std::to_string(row) +
                                              ", outside the token table");
    }
    rows[i] = static_cast<std::uint64_t>(row);
  }
  return rows;
}

}  // namespace

Status reference_embed(const Model& model, std::span<const std::int64_t> ids, std::uint64_t batch,
                       std::uint64_t start, std::span<float> out, std::span<const std::int64_t> segment_ids,
                       std::size_t output) {
  if (output >= model.outputs().size()) {
    return Error(ErrorCode::kInvalidArgument, "output index " + std::to_string(output) + " is past the model's " +
                                                  std::to_string(model.outputs().size()) + " outputs");
  }
  const OutputInfo& o = model.outputs()[output];
  const OutputRules& rules = *o.rules;
  const std::uint64_t dim = o.dim();
  if (ids.empty()) {
    if (!out.empty()) {
      return Error(ErrorCode::kInvalidArgument,
                   "output has " + std::to_string(out.size()) + " floats, expected 0 for no ids");
    }
    return {};
  }
  if (batch == 0 || ids.size() % batch != 0) {
    return Error(ErrorCode::kInvalidArgument, std::to_string(ids.size()) +
                                                  " ids cannot be split into " +
                                                  std::to_string(batch) + " sequences of equal length");
  }
  const std::uint64_t length = ids.size() / batch;
  if (out.size() / dim != ids.size() || out.size() % dim != 0) {
    return Error(ErrorCode::kInvalidArgument,
                 "output has " + std::to_string(out.size()) + " floats, expected " +
                     std::to_string(ids.size()) + " ids x dim " + std::to_string(dim));
  }
  // Positions: every sequence uses start .. start + length - 1, so checking the last suffices.
  // With padding-aware positions, pads take a fixed row and only non-pads advance: the last
  // position of a sequence is start + (its non-pads) - 1 (FORMAT.md section 7).
  const std::uint64_t limit = o.max_positions();
  const std::int64_t padding = rules.padding_id;
  if (o.position != nullptr && padding >= 0) {
    for (std::uint64_t b = 0; b < batch; ++b) {
      std::uint64_t nonpads = 0;
      for (std::uint64_t t = 0; t < length; ++t) {
        if (ids[b * length + t] == padding) continue;
        if (start >= limit || nonpads >= limit - start) {
          const std::string position = start > UINT64_MAX - nonpads ? "(overflow)" : std::to_string(start + nonpads);
          return Error(ErrorCode::kOutOfRange, "sequence " + std::to_string(b) + ", position " + std::to_string(t) +
                                                   ": position " + position + " is past the limit of " +
                                                   std::to_string(limit) + " positions");
        }
        ++nonpads;
      }
    }
  } else if (o.position != nullptr) {
    const auto last = detail::checked_add(start, length - 1);
    if (!last || *last >= limit) {
      // The first offending position of each sequence; start + t <= limit cannot overflow.
      const std::uint64_t t = start >= limit ? 0 : limit - start;
      return Error(ErrorCode::kOutOfRange, "sequence 0, position " + std::to_string(t) +
                                               ": position " + std::to_string(start + t) +
                                               " is past the limit of " + std::to_string(limit) +
                                               " positions");
    }
  }
  // Ids outside the table: refused, or row 0 for an output whose rule says so (FORMAT.md 7).
  const bool row_zero = rules.out_of_range == OutOfRangeIds::kRowZero;
  if (!row_zero) {
    if (Status s = check_ids(ids, length, o.vocab_size(), "id"); !s) return s;
  }
  if (!segment_ids.empty()) {
    if (o.segment == nullptr) {
      return Error(ErrorCode::kInvalidArgument, "segment ids given, but the model has no segment table");
    }
    if (segment_ids.size() != ids.size()) {
      return Error(ErrorCode::kInvalidArgument, std::to_string(segment_ids.size()) + " segment ids for " +
                                                    std::to_string(ids.size()) + " ids");
    }
    if (Status s = check_ids(segment_ids, length, o.segment->rows, "segment"); !s) return s;
  }

  auto rows = token_rows(o, ids);
  if (!rows) return std::move(rows).error();
  std::vector<float> extra(dim);
  const std::uint64_t offset = rules.position_offset;
  const auto token_scale = static_cast<float>(rules.token_scale);
  const auto scale = static_cast<float>(rules.output_scale);
  const std::int64_t padding_id = rules.padding_id;
  std::uint64_t nonpad = 0;  // padding-aware positions: non-pad tokens before this one
  for (std::uint64_t i = 0; i < ids.size(); ++i) {
    const std::span<float> row = out.subspan(i * dim, dim);
    decode_row(*o.token, (*rows)[i], row);
    if (token_scale != 1.0f) {
      for (float& v : row) v *= token_scale;
    }
    if (o.segment != nullptr) {
      decode_row(*o.segment, segment_ids.empty() ? 0 : static_cast<std::uint64_t>(segment_ids[i]), extra);
      for (std::uint64_t j = 0; j < dim; ++j) row[j] += extra[j];
    }
    if (o.position != nullptr) {
      std::uint64_t p = start + i % length + offset;
      if (padding_id >= 0) {
        if (i % length == 0) nonpad = 0;
        p = ids[i] == padding_id ? offset - 1 : start + nonpad++ + offset;
      }
      decode_row(*o.position, p, extra);
      for (std::uint64_t j = 0; j < dim; ++j) row[j] += extra[j];
    }
    if (scale != 1.0f) {
      for (float& v : row) v *= scale;
    }
    if (o.norm_weight != nullptr) {
      layer_norm(row, *o.norm_weight, o.norm_bias, rules.norm_epsilon);
    }
  }
  return {};
}

}  // namespace embedrt

namespace embedrt {

Status reference_pool(const Model& model, std::size_t output, std::span<const std::int64_t> ids,
                      std::span<const std::uint64_t> offsets, std::uint64_t bags, std::span<const float> weights,
                      PoolingMode mode, std::optional<bool> normalize, std::span<float> out, OutputDType out_dtype) {
  if (output >= model.outputs().size()) {
    return Error(ErrorCode::kInvalidArgument, "output index " + std::to_string(output) + " is past the model's " +
                                                  std::to_string(model.outputs().size()) + " outputs");
  }
  const OutputInfo& o = model.outputs()[output];
  const OutputRules& rules = *o.rules;
  if (mode == PoolingMode::kNone) mode = rules.pooling;
  if (mode == PoolingMode::kNone) return Error(ErrorCode::kInvalidArgument, "no pooling mode");
  const bool unit_norm = normalize.value_or(rules.normalize);
  const std::uint64_t dim = o.dim();
  // Bag boundaries.
  std::vector<std::uint64_t> bounds(offsets.begin(), offsets.end());
  if (bounds.empty()) {
    if (bags == 0 || ids.size() % bags != 0) return Error(ErrorCode::kInvalidArgument, "ids do not split into equal bags");
    for (std::uint64_t b = 0; b <= bags; ++b) bounds.push_back(b * (ids.size() / bags));
  }
  bags = bounds.size() - 1;
  if (out.size() != bags * dim) return Error(ErrorCode::kInvalidArgument, "output size");
  if (!weights.empty() && weights.size() != ids.size()) return Error(ErrorCode::kInvalidArgument, "weights size");
  for (std::int64_t id : ids) {
    if (id < 0 || static_cast<std::uint64_t>(id) >= o.vocab_size()) {
      if (rules.out_of_range == OutOfRangeIds::kRefuse) {
        return Error(ErrorCode::kOutOfRange, "id " + std::to_string(id) + " is out of range");
      }
    }
  }
  auto rows = token_rows(o, ids);
  if (!rows) return std::move(rows).error();
  std::vector<float> row(dim), id_weights(o.pooling_weights ? o.vocab_size() : 0);
  if (o.pooling_weights != nullptr) decode_row(*o.pooling_weights, 0, id_weights);
  const auto token_scale = static_cast<float>(rules.token_scale);
  const auto output_scale = static_cast<float>(rules.output_scale);
  for (std::uint64_t b = 0; b < bags; ++b) {
    const std::span<float> acc = out.subspan(b * dim, dim);
    std::fill(acc.begin(), acc.end(), 0.0f);
    const std::uint64_t n = bounds[b + 1] - bounds[b];
    for (std::uint64_t i = bounds[b]; i < bounds[b + 1]; ++i) {
      const std::int64_t id = ids[i];
      const bool outside = id < 0 || static_cast<std::uint64_t>(id) >= o.vocab_size();
      decode_row(*o.token, (*rows)[i], row);
      if (token_scale != 1.0f) {
        for (float& v : row) v *= token_scale;
      }
      // A weight from the request, else from the output's per-token weights table, else none.
      bool weighted = !weights.empty();
      float weight = weighted ? weights[i] : 1.0f;
      if (!weighted && o.pooling_weights != nullptr) {
        weight = id_weights[outside ? 0 : static_cast<std::uint64_t>(id)];
        weighted = true;
      }
      for (std::uint64_t j = 0; j < dim; ++j) {
        if (mode == PoolingMode::kMax) {
          acc[j] = i == bounds[b] || row[j] > acc[j] ? row[j] : acc[j];
        } else {
          acc[j] = weighted ? std::fma(weight, row[j], acc[j]) : acc[j] + row[j];
        }
      }
    }
    if (mode == PoolingMode::kMean && n > 0) {
      for (float& v : acc) v = v / static_cast<float>(n);
    }
    if (output_scale != 1.0f) {
      for (float& v : acc) v *= output_scale;
    }
    if (unit_norm) {
      // The vector as the output holds it, then divided by its length.
      for (float& v : acc) {
        if (out_dtype == OutputDType::kBF16) v = bf16_to_f32(f32_to_bf16(v));
        if (out_dtype == OutputDType::kF16) v = f16_to_f32(f32_to_f16(v));
      }
      double squares = 0;
      for (float v : acc) squares += static_cast<double>(v) * v;
      const double norm = std::sqrt(squares);
      if (norm > 0) {
        for (float& v : acc) v = static_cast<float>(v / norm);
      }
    }
  }
  return {};
}

}  // namespace embedrt
