// The streaming kernels behind the honest rooflines (roofline.hpp), one build per ISA like the
// library's kernels: plain data in, no inline function shared with baseline code (each ISA unit
// compiles roofline_body.inl inside its own namespace with the -m flags of
// runtime/kernels/isa_table.def).
#pragma once

#include <cstddef>
#include <cstdint>

#include "embedrt/embedder.hpp"
#include "embedrt/format.hpp"
#include "embedrt/isa.hpp"

namespace embedrt::perf {

// Rows [begin, end) of a table read in order, each converted to the output dtype and written
// to the same row of `out`: the bytes a gather moves, without the gather.
struct RowStream {
  const std::byte* table = nullptr;
  std::uint64_t stride = 0;         // bytes between table rows, as in the file
  std::uint64_t dim = 0;
  std::uint64_t params_offset = 0;  // int8_rowwise: where a row's scale and bias are
  std::byte* out = nullptr;         // dim elements of the output dtype per row, packed
  bool stream = false;              // non-temporal stores
};
using StreamRows = void (*)(const RowStream& args, std::uint64_t begin, std::uint64_t end);

// One token at the physical limit of a cold row: every cache line of the row prefetched at once
// (all misses in flight together), then the row decoded, added to `position` (may be null) and
// stored.
struct DecodeRow {
  const std::byte* token = nullptr;
  const std::byte* position = nullptr;
  std::uint64_t row_bytes = 0;
  std::uint64_t dim = 0;
  std::uint64_t params_offset = 0;
  std::byte* out = nullptr;
};
using DecodeLimit = void (*)(const DecodeRow& args);

struct RooflineKernels {
  StreamRows stream[4][3];  // [DType - 1][OutputDType]
  DecodeLimit decode[4][3];
  StreamRows get_stream(DType table, OutputDType out) const noexcept {
    return stream[static_cast<int>(table) - 1][static_cast<int>(out)];
  }
  DecodeLimit get_decode(DType table, OutputDType out) const noexcept {
    return decode[static_cast<int>(table) - 1][static_cast<int>(out)];
  }
};

const RooflineKernels& scalar_roofline();
const RooflineKernels& sse42_roofline();
const RooflineKernels& avx2_roofline();
const RooflineKernels& avx512_roofline();

// The build for `isa` (the one the Embedder under test runs).
const RooflineKernels& roofline_kernels(Isa isa) noexcept;

}  // namespace embedrt::perf
