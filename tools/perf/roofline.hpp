// The honest roofline of a gather case: the time the memory system needs to move exactly the
// case's bytes — its table rows (table dtype, the file's row stride) read in order and its
// output rows (output dtype, converted) written — over buffers several times the last-level
// cache, on the same threads and the same ISA as the kernel under test, with the rows ahead
// prefetched in software or not (RowStream::prefetch_ahead; the fastest counts). No gather of the
// same rows should beat a sequential stream of them, so "% of roofline" past 100% means the
// gather's rows came from cache, or that this stream is not yet the fastest there is.
#pragma once

#include <cstdint>
#include <memory>
#include <oneapi/tbb/task_arena.h>

#include "embedrt/embedder.hpp"
#include "embedrt/format.hpp"
#include "embedrt/isa.hpp"
#include "roofline_kernels.hpp"

namespace embedrt::perf {

struct StreamCase {
  DType table = DType::kF32;
  OutputDType out = OutputDType::kF32;
  std::uint64_t dim = 768;
  std::uint64_t stride = 0;         // bytes between table rows; 0: default_row_stride(table, dim)
  std::uint64_t tokens = 8192;      // rows per call, as the case's batch x sequence
  std::uint64_t out_sets = 1;       // output buffers rotated between calls, as the case's
  std::uint64_t min_table_bytes = 0;  // the table buffer is at least this large (several x LLC)
  bool stream = false;              // non-temporal stores, as the Embedder would choose
  // Bags: > 1 pools every `bag` consecutive rows (summed in f32) into one row of the output dtype
  // (tokens / bag rows out per call; tokens must be a multiple of bag); `mean` divides the sum.
  std::uint64_t bag = 1;
  bool mean = false;
  BagPlan bag_plan = BagPlan::kRowAtATime;  // wide rows only
  std::uint64_t prefetch_ahead = 0;  // RowStream::prefetch_ahead
};

class StreamRoofline {
 public:
  StreamRoofline(Isa isa, const StreamCase& c);
  ~StreamRoofline();
  StreamRoofline(const StreamRoofline&) = delete;
  StreamRoofline& operator=(const StreamRoofline&) = delete;

  // One call: the next `tokens` rows of the table into the next output buffer, split over the
  // arena's threads in contiguous ~128 KiB chunks of output (as the Embedder splits a request).
  void call(tbb::task_arena& arena);
  void set_bag_plan(BagPlan plan) noexcept;
  void set_prefetch_ahead(std::uint64_t bytes) noexcept;
  // Where those prefetches go: kL2 where has_prefetch_l2_roofline(isa), else (and for kAuto) L1.
  void set_prefetch_level(PrefetchLevel level) noexcept;
  bool bag_plans_differ() const noexcept;  // bags of rows wider than the registers (bag_register_values)

  std::uint64_t table_bytes() const noexcept;   // the table buffer streamed through
  std::uint64_t output_bytes() const noexcept;  // per call
  std::uint64_t bytes_per_token() const noexcept;  // row_bytes(table) + dim x output element (no bag)
  // Table row payloads read plus output written, per call (what GB/s counts; bags included).
  std::uint64_t bytes_per_call() const noexcept;

 private:
  void call_bags(tbb::task_arena& arena, const RowStream& rows);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace embedrt::perf
