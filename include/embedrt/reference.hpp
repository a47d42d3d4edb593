// The reference embedding path: plain scalar code, written to be obviously right. It is the
// ground truth the fast kernels are tested against, not the hot path.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "embedrt/error.hpp"
#include "embedrt/embedder.hpp"
#include "embedrt/model.hpp"

namespace embedrt {

// Decodes row `row` of `table` into `out` (table.dim floats), whatever the table's dtype.
// The caller guarantees row < table.rows and out.size() >= table.dim.
void decode_row(const TableView& table, std::uint64_t row, std::span<float> out) noexcept;

// The computation of docs/FORMAT.md section 7, for `batch` sequences of equal length:
//   x = token[ids[b, t]] (+ segment[segment_ids[b, t]]) (+ position[start + t + position_offset])
//   x *= output_scale; x = LayerNorm(x) * norm_weight + norm_bias (when the model has them)
// `ids` is row-major [batch, length]; `segment_ids` is empty (all segment 0) or shaped like
// `ids`; `out` holds ids.size() * dim floats. Everything is validated before anything is
// written; the error names the batch row, the position, the value and the limit. `output` picks
// one of Model::outputs() (its tables and rules; `out` holds ids.size() * its dim floats).
Status reference_embed(const Model& model, std::span<const std::int64_t> ids, std::uint64_t batch,
                       std::uint64_t start, std::span<float> out,
                       std::span<const std::int64_t> segment_ids = {}, std::size_t output = 0);

// FORMAT.md section 7.2 for one output: one f32 vector per bag (`out` holds bags * dim floats).
// Bags are `offsets` (bags + 1 boundaries) or, when empty, `bags` equal runs of `ids`; `weights` is
// empty or one per id; mode kNone takes the output's pooling.mode, and `normalize` (when set) is
// used instead of the output's pooling.normalize. The normalization divides the vector as an output
// of `out_dtype` holds it (16-bit: rounded first) by its length computed in double; the caller
// rounds the f32 result to `out_dtype`.
Status reference_pool(const Model& model, std::size_t output, std::span<const std::int64_t> ids,
                      std::span<const std::uint64_t> offsets, std::uint64_t bags, std::span<const float> weights,
                      PoolingMode mode, std::optional<bool> normalize, std::span<float> out,
                      OutputDType out_dtype = OutputDType::kF32);

}  // namespace embedrt
