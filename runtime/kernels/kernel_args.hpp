// What a kernel needs for one request (plain data only; see RawIds), fully validated by the Embedder before any kernel runs:
// every id, segment and position read through these pointers is in range.
#pragma once

#include <cstddef>
#include <cstdint>

#include "embedrt/embedder.hpp"
#include "embedrt/format.hpp"

namespace embedrt::kernels {

// Ids as raw memory: per-ISA code must not call inline functions shared with other units (the
// linker keeps one copy, which may be the AVX-512 one), so it reads ids through its own helper.
struct RawIds {
  const void* data = nullptr;
  bool wide = true;  // int64 (else int32)
  // No member functions: an inline member would be compiled into every ISA unit (see kernel_body.inl).
};

// The fewest rows ahead that rows of at most kFarRowBytes are prefetched line by line
// (interleaved_plan in kernel_body.inl: otherwise about 8 KiB of rows) and that 16-bit rows pooled
// in block passes prefetch their columns (block_pass_distance in bag_body.inl): kNearRowsAhead, or
// kFarRowsAhead where the prefetch calibration found such rows read faster so (Embedder:
// PrefetchCalibration::min_rows_ahead).
constexpr std::uint64_t kNearRowsAhead = 4;
constexpr std::uint64_t kFarRowsAhead = 32;
constexpr std::uint64_t kFarRowBytes = 1024;

struct KernelArgs {
  const std::byte* token = nullptr;
  std::uint64_t token_stride = 0;
  // Nonzero: ids at or past this many rows (negative ones included) read row 0 (OutOfRangeIds::kRowZero).
  std::uint64_t zero_outside_rows = 0;
  const std::byte* id_map = nullptr;  // int32 per id: its token row (2.0 ids.map); nullptr: the id is the row
  const std::byte* segment = nullptr;  // nullptr: the model has no segment table
  std::uint64_t segment_stride = 0;
  const std::byte* position = nullptr;  // nullptr: the model has no position table
  std::uint64_t position_stride = 0;
  const float* norm_weight = nullptr;  // nullptr: no LayerNorm
  const float* norm_bias = nullptr;    // nullptr: zero bias
  std::uint64_t dim = 0;
  std::uint64_t params_offset = 0;  // row_params_offset(dtype, dim) of a quantized table, computed once (FORMAT.md 4.2)
  std::uint64_t row_bytes = 0;      // row_bytes(dtype, dim): a row's bytes without its padding, computed once
  float token_scale = 1.0f;  // multiplies the token row before any addition
  float scale = 1.0f;        // multiplies the sum
  float epsilon = 1e-5f;

  RawIds ids;
  RawIds segment_ids;   // empty: type 0
  RawIds position_ids;  // empty: from the sequence layout below
  const std::uint64_t* offsets = nullptr;  // ragged boundaries (sequences + 1), or nullptr: uniform
  std::uint64_t sequences = 1;
  std::uint64_t length = 0;                // uniform sequence length
  const std::uint64_t* starts = nullptr;   // per sequence, or nullptr: `start` for all
  std::uint64_t start = 0;
  std::uint64_t position_offset = 0;
  std::int64_t padding_id = -1;  // >= 0: padding-aware positions (FORMAT.md section 7)
  // The call's steps [0, steps). A range prefetches the rows ahead of its last ones up to here, past
  // its own end: the Embedder has oneTBB halve a call until its ranges are at most about 128 KiB
  // (8192 tokens of an f32 dim-768 output into ranges of 32, 1024 bags of 8 int8 dim-768 rows into
  // ranges of 16), and a thread takes them in order but where another
  // steals, so a range that stopped prefetching its last rows' successors left its thread's next
  // range to start on misses, every few dozen rows. Measured (bench/ab.py, Zen 5, 1 thread, tables
  // 3.9x the LLC, 5 rounds, one output buffer; against each range prefetching up to its own end):
  // see the commit that added it. 0: the range's own end (a caller that does not say).
  std::uint64_t steps = 0;

  void* out = nullptr;
  bool nontemporal = false;
  // Embed position-major (see StepOrder in kernel_body.inl); true only when `offsets`, `starts` and
  // `position_ids` are null, `padding_id` is negative and there is a position table.
  bool position_major = false;
  // The token table is larger than half the LLC, so its rows come from memory (the Embedder's
  // rule): wider quantized rows are staged in L1 too, as stages_rows in kernel_body.inl says.
  bool token_rows_from_memory = false;
  std::uint64_t min_rows_ahead = kNearRowsAhead;  // as above, or EmbedderOptions::min_rows_ahead (4-256)
};

// What a bag kernel needs (FORMAT.md 7.2), validated like KernelArgs: every id reads a row.
struct PoolArgs {
  const std::byte* token = nullptr;
  std::uint64_t token_stride = 0;
  std::uint64_t zero_outside_rows = 0;  // as KernelArgs::zero_outside_rows
  const std::byte* id_map = nullptr;    // as KernelArgs::id_map
  std::uint64_t dim = 0;
  std::uint64_t params_offset = 0;
  std::uint64_t row_bytes = 0;  // as KernelArgs::row_bytes
  float token_scale = 1.0f;   // multiplies every row before pooling
  float output_scale = 1.0f;  // multiplies the pooled vector (before normalization)

  RawIds ids;
  const std::uint64_t* offsets = nullptr;  // bags + 1 boundaries, or nullptr: bags of `length` ids
  std::uint64_t length = 0;
  const float* weights = nullptr;          // one per id, or nullptr
  const float* id_weights = nullptr;       // a weight per id (the f32 [1, vocab] pooling.weights table), or nullptr
  PoolingMode mode = PoolingMode::kSum;    // kSum, kMean or kMax
  bool normalize = false;
  // The call's bags [0, bags): a range prefetches the rows ahead of its last bags up to here, past
  // its own end, as KernelArgs::steps. 0: the range's own end.
  std::uint64_t bags = 0;

  void* out = nullptr;  // bags x dim
  // Streaming stores for the pooled vectors, as KernelArgs::nontemporal; only where every output row
  // starts vector-aligned (streams_bags in bag_body.inl), else the stores go through the cache.
  bool nontemporal = false;
  // As KernelArgs::token_rows_from_memory: AVX-512 16-bit rows of 17-24 vectors, and in the L2
  // kernel set rows of 13-24, are then pooled in narrower block passes (memory_block_passes in
  // bag_body.inl).
  bool token_rows_from_memory = false;
  std::uint64_t min_rows_ahead = kNearRowsAhead;  // as KernelArgs::min_rows_ahead
};

// Embeds tokens [begin, end) of a request.
using RangeKernel = void (*)(const KernelArgs& args, std::uint64_t begin, std::uint64_t end);
// Pools bags [begin, end) of a request.
using BagKernel = void (*)(const PoolArgs& args, std::uint64_t begin, std::uint64_t end);

// One kernel per (value table dtype, output dtype), for one ISA: f32, f16, bf16, int8, int4
// (int32 tables hold id maps, not values: Model never gives one to a kernel).
struct KernelTable {
  RangeKernel kernels[5][3];  // [value_dtype_index(dtype)][OutputDType]
  BagKernel bag_kernels[5][3];
  static int value_dtype_index(DType table) noexcept {
    return table == DType::kInt4Rowwise ? 4 : static_cast<int>(table) - 1;
  }
  RangeKernel get(DType table, OutputDType out) const noexcept {
    return kernels[value_dtype_index(table)][static_cast<int>(out)];
  }
  BagKernel get_bag(DType table, OutputDType out) const noexcept {
    return bag_kernels[value_dtype_index(table)][static_cast<int>(out)];
  }
};

const KernelTable& scalar_kernels();
const KernelTable& sse42_kernels();
const KernelTable& avx2_kernels();
const KernelTable& avx512_kernels();
const KernelTable& avx512bf16_kernels();
// The kernels with every software prefetch into L2 only (PrefetchLevel::kL2,
// prefetch_l2_kernels.inl), for the ISAs that have them; the others prefetch into L1 whatever the
// level.
namespace avx2 {
const KernelTable& prefetch_l2_kernels();
}
namespace avx512 {
const KernelTable& prefetch_l2_kernels();
}
namespace avx512bf16 {
const KernelTable& prefetch_l2_kernels();
}

}  // namespace embedrt::kernels
