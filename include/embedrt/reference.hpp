// The reference embedding path: plain scalar code, written to be obviously right. It is the
// ground truth the fast kernels are tested against, not the hot path.
#pragma once

#include <cstdint>
#include <span>

#include "embedrt/error.hpp"
#include "embedrt/model.hpp"

namespace embedrt {

// Decodes row `row` of `table` into `out` (table.dim floats), whatever the table's dtype.
// The caller guarantees row < table.rows and out.size() >= table.dim.
void decode_row(const TableView& table, std::uint64_t row, std::span<float> out) noexcept;

// out[b, t, :] = token[ids[b, t]] + position[start + t + position_offset]
// `ids` holds `batch` sequences of equal length, row-major; `out` holds ids.size() * dim floats.
// Every id and position is validated before anything is written; the error names the batch row,
// the position, the value and the limit.
Status reference_embed(const Model& model, std::span<const std::int64_t> ids, std::uint64_t batch,
                       std::uint64_t start, std::span<float> out);

}  // namespace embedrt
