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
  std::uint64_t params_offset = 0;  // int8/int4_rowwise: where a row's scale and bias are (row_params_offset)
  std::byte* out = nullptr;         // dim elements of the output dtype per row, packed
  bool stream = false;              // non-temporal stores
  // The lines this many bytes further on are prefetched in software as each row (a stream) or bag
  // of rows is read (pooled; wide rows: a row or group of rows at a time in BagPlan::kRowAtATime and
  // kRowGroups, a block of each row at a time in kColumnTiles); 0: none, the hardware's
  // prefetchers alone. A core following a stream
  // with its hardware prefetchers alone keeps fewer lines in flight than software prefetches keep,
  // so gathers of random rows with them ran past such a roofline (FBGEMM's int8 768 bags to 133%).
  std::uint64_t prefetch_ahead = 0;
};
// The distances the roofline tries, keeping the fastest (bench --roofline): none is the fastest
// everywhere. Measured on a 32 MiB-L3 Zen 5 (1 thread, CPU clock, one output buffer, tables 4x the
// LLC, two runs, M rows/s with none / 4 KiB / 8 KiB ahead): bags of 8 int8 768 20 / 34 / 32-34, f16
// 768 18-19 / 21 / 20, f32 256 27 / 35-37 / 33, f32 64 124-131 / 128-130 / 128-132; streamed f32
// 256 27 / 26-29 / 25-26, f32 768 8.6 / 7.8 / 7.6-7.8. (16 KiB was no faster than 8 in an earlier
// probe.) 16 KiB since BagPlan::kColumnTiles, whose prefetches go a block of a row at a time: on a
// third 32 MiB-L3 Zen 5 (1 thread, bags of 32 int8 768, one run, M rows/s with 4 / 8 / 12 / 16 KiB
// ahead) 22.5 / 29.4 / 30.2 / 31.3, where the other plans' best was 24.8 and the kernel pooled 36
// M random rows a second.
inline constexpr std::uint64_t kPrefetchAheadBytes[] = {0, 4096, 8192, 16384};
using StreamRows = void (*)(const RowStream& args, std::uint64_t begin, std::uint64_t end);

// How a bag of rows wider than the accumulator registers is pooled (narrower rows are summed in
// registers whatever the plan): no plan is the fastest for every dtype, width and bag size, so the
// roofline measures each and keeps the fastest (bench --roofline --bag).
//  kRowAtATime:   each row added in turn to the bag's sums in L1
//  kRowGroups:    8 rows at a time side by side, each sum loaded and stored once per group
//  kColumnBlocks: a block of columns summed over all the rows in registers, then the next block
//  kColumnTiles:  every block of columns over a tile of 12 rows (sums kept in L1 between tiles),
//                 then the next tile: the kernel's tiled block passes (bag_body.inl), which pooled
//                 random int8 768 rows past the other three plans' in-order rows (to 132% of them)
enum class BagPlan { kRowAtATime, kRowGroups, kColumnBlocks, kColumnTiles };
inline constexpr BagPlan kBagPlans[] = {BagPlan::kRowAtATime, BagPlan::kRowGroups, BagPlan::kColumnBlocks,
                                        BagPlan::kColumnTiles};
inline constexpr const char* bag_plan_name(BagPlan p) {
  return p == BagPlan::kRowAtATime  ? "row at a time"
         : p == BagPlan::kRowGroups ? "row groups"
         : p == BagPlan::kColumnBlocks ? "column blocks"
                                       : "column tiles";
}

// Bags [begin, end) of `bag` consecutive table rows each: row b of `out` = the rows
// [b * bag, (b + 1) * bag) converted and summed in f32 (then / bag for a mean), converted to the
// output dtype: the bytes a bag of `bag` ids moves (its rows in, one pooled row out), without the
// gather. `scratch` holds `dim` floats for the calling thread.
struct BagStream {
  RowStream rows;
  std::uint64_t bag = 1;
  bool mean = false;
  BagPlan plan = BagPlan::kRowAtATime;
  float* scratch = nullptr;
};
using BagRows = void (*)(const BagStream& args, std::uint64_t begin, std::uint64_t end);

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

// The value dtypes, in the order of the kernels' tables below (int32, an id map, has none).
inline constexpr DType kRooflineDTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kInt8Rowwise,
                                            DType::kInt4Rowwise};
// A table dtype's index in kRooflineDTypes, or -1.
constexpr int roofline_dtype_index(DType table) noexcept {
  for (int k = 0; k < 5; ++k) {
    if (kRooflineDTypes[k] == table) return k;
  }
  return -1;
}

// Every getter returns nullptr for a dtype without kernels (int32) or an output dtype outside the enum.
struct RooflineKernels {
  StreamRows stream[5][3];  // [roofline_dtype_index][OutputDType]
  DecodeLimit decode[5][3];
  BagRows bag[5][3];
  // The widest bag row (in values) pooled in registers whatever the BagPlan: the plans differ
  // only for wider rows.
  std::uint64_t bag_register_values = 0;
  template <typename Fn>
  static Fn pick(const Fn (&table)[5][3], DType dtype, OutputDType out) noexcept {
    const int d = roofline_dtype_index(dtype), o = static_cast<int>(out);
    return d < 0 || o < 0 || o > 2 ? nullptr : table[d][o];
  }
  StreamRows get_stream(DType table, OutputDType out) const noexcept { return pick(stream, table, out); }
  DecodeLimit get_decode(DType table, OutputDType out) const noexcept { return pick(decode, table, out); }
  BagRows get_bag(DType table, OutputDType out) const noexcept { return pick(bag, table, out); }
};

const RooflineKernels& scalar_roofline();
const RooflineKernels& sse42_roofline();
const RooflineKernels& avx2_roofline();
const RooflineKernels& avx512_roofline();
const RooflineKernels& avx512bf16_roofline();
// The same units prefetching into L2 (roofline_prefetch_l2.inl), built where the library's L2
// kernels are (EMBEDRT_PREFETCH_L2_KERNELS).
const RooflineKernels& avx2_l2_roofline();
const RooflineKernels& avx512_l2_roofline();
const RooflineKernels& avx512bf16_l2_roofline();

// The build for `isa` (the one the Embedder under test runs) whose software prefetches go to
// `level` (kL1 or kL2; kAuto is kL1): kL2 only where has_prefetch_l2_roofline(isa), else the L1 build.
const RooflineKernels& roofline_kernels(Isa isa, PrefetchLevel level = PrefetchLevel::kL1) noexcept;
bool has_prefetch_l2_roofline(Isa isa) noexcept;

}  // namespace embedrt::perf
