// Bags (FORMAT.md 7.2): one pooled vector per bag of ids, without writing a row per token.
// Included by kernel_body.inl inside its anonymous namespace, so it shares its loads, stores and
// helpers, and is compiled once per ISA like the rest of the kernel.
//
// For every bag, the output is made in chunks of up to kChunkFloats values. A chunk of at most
// kRegisterVectors vectors (with AVX-512, rows of dim <= 256) is pooled in registers in one pass
// over the bag's rows, prefetching the row ahead line by line when it spans more than a line
// (interleaves_prefetch). A wider one is pooled into the chunk's
// f32 values (the output row itself when it is f32, else a buffer in L1) one row, or a group of 4
// or 8 rows side by side, per pass over them (pool_rows), so each row is read once, in order, where
// the L2's stream prefetcher can follow it (pooling a block of registers over all the rows, then
// the next block, read every row once per block, each time 512 bytes from a different place);
// except that 16-bit and quantized rows of at most 512 bytes with 16 registers (AVX2, SSE4.2),
// 16-bit rows of at most kChunkFloats values with AVX-512, and int8 rows of at most kChunkFloats
// values with every vector ISA (takes_block_passes), are pooled a block of
// registers at a time, a pass over the rows per block, each pass prefetching its own columns of
// the rows ahead; of a bag of more than 12 ids, 12 rows at a time when a block is at most 6 lines of
// a row (pool_block_passes). So are AVX-512 16-bit rows of 17-24 vectors from a table in memory, in
// blocks of 12 vectors, and in the L2 kernel set (which PrefetchLevel::kAuto takes where random
// reads are slow) rows of 13-16 vectors too, though they fit the registers (memory_block_passes).
// Quantized rows of at most 5 lines that pool_rows pools (AVX-512 int4 dims 272-632; the scalar
// build) are copied into L1 first, 16 ids at a time (RowStage, in kernel_body.inl).
// Either way each element takes the rows in the order of the ids, so it sees exactly the
// reference's sequence of f32 operations:
//   sum:  acc = acc + x            (x = row * token_scale when token_scale != 1)
//         acc = fma(w, x, acc)     with a weight (correctly rounded on every ISA)
//   mean: the sum, then acc / n
//   max:  acc = first x, then (x > acc ? x : acc)
// then acc * output_scale. Normalization works on the vector as the output holds it (a 16-bit
// output's values rounded first, as model2vec normalizes its f16 mean): the squares are summed in
// the fixed 16-lane order of lane_ordered_sum (as LayerNorm's statistics), so every ISA gives the
// same bits; then every value is divided by the length: in the registers for a plain request's
// f32 vector that fits them (normalize_in_registers), else in place for an f32 output, from `chunk`
// for a vector of one chunk otherwise, or by pooling the chunks again (their rows are in cache).
// Streaming stores (PoolArgs::nontemporal) write each vector once, from registers or from `chunk`,
// never the output row as a sum in progress.

// How many vectors of a chunk pool_block holds in registers: 8 of the 16 AVX2/SSE registers; with
// AVX-512's 32, 16 (a dim-256 row in one pass, as FBGEMM's JIT kernels hold it). Measured (bench/
// ab.py, 1 thread, 5 rounds, 16 in registers / pool_rows, tables 3.9x the LLC; a 480 MiB-LLC
// Intel AVX-512 machine): f16 256 bags of 32 1.25x, f32 256 bags of 8 1.10x; cached 1.19x and
// 1.07x. Quantized rows in registers lost there (3 rounds, cached, prefetching as pool_rows did):
// int8 256 0.88x, int4 256 0.96x; on a 32 MiB-L3 AMD Zen 5 (AVX-512 BF16, 5 rounds, with the row
// ahead prefetched line by line) they won: int8 256 bags of 8 / 32 2.22x / 2.27x, int8 128 1.33x,
// int4 256 1.86x, against pool_rows and its staged rows.
template <DType TD>
constexpr std::uint64_t kRegisterVectors = Traits::kWidth == 1 || Traits::kWidth == 16 ? 16 : 8;
constexpr std::uint64_t kChunkFloats = 1024;  // 4 KiB of L1; a multiple of 16 (the norm's lanes) and of a register block
static_assert(kChunkFloats % kNormLanes == 0 &&
              kChunkFloats % (kRegisterVectors<DType::kF32> * Traits::kWidth) == 0);  // the most of any dtype

// The table row of id i (through the id map; row 0 for an id outside the table when the output says so).
__attribute__((always_inline)) inline std::uint64_t bag_row(const PoolArgs& a, std::uint64_t i) noexcept {
  return mapped_row(a.id_map, effective_id(a.ids, a.zero_outside_rows, i));
}

// Software prefetch a fixed number of ids ahead of the first pass over the rows, across bag
// boundaries (the ids of consecutive bags are consecutive), up to the end of the call, past the
// range's (PoolArgs::bags).
struct RowPrefetch {
  std::uint64_t distance = 0;   // ids ahead
  std::uint64_t bytes = 0;      // of each row, from its start (prefetch_plan)
  std::uint64_t ids_end = 0;    // the first id past the range
  std::uint64_t ahead_end = 0;  // the first id past the call (PoolArgs::bags): no row ahead past it
  bool block_passes = false;    // the rows are pooled in block passes, each prefetching its own columns
  bool interleaved = false;     // a row fits the registers: pool_block prefetches the row ahead line by line
  std::uint64_t block_vectors = 0;  // the width of a block pass (block_pass_vectors), when block_passes
};

// How a bag's ids become rows and how the rows combine, fixed for the whole call: the gather's
// IdPath, whose plain paths here are also the common request (sum or mean of unweighted, unscaled
// rows). Their loop per id is the id's load, the prefetch, the row's loads and adds, about 25
// instructions where the general path takes about 75 (AVX-512, dim 64 f32), so the core's reorder
// window holds the loads of about 3 times as many rows at once.
inline IdPath bag_path(const PoolArgs& a) noexcept {
  const bool plain = a.id_map == nullptr && a.zero_outside_rows == 0 && a.weights == nullptr &&
                     a.id_weights == nullptr && a.token_scale == 1.0f && a.mode != PoolingMode::kMax;
  return plain ? plain_id_path(a.ids) : IdPath::kGeneral;
}

// How far ahead, and how much of each row, a bag prefetches. Float rows of 6 to 48 lines (f32 dims
// 96 to 768, 16-bit 192 to 1536) take their first 2 lines 12 rows ahead, as the gather's quick rows
// do: the L2's streamer brings the rest of a row once its first lines are read, and 12 heads in
// flight keep more rows coming than kBagReach's plan (2-8 whole rows, or 2-3 rows' first 8 lines),
// which fills the miss buffers. Measured (bench/ab.py, 1 thread, tables 3.9x the LLC, against 6-8
// whole rows ahead, a 480 MiB-LLC AVX-512 machine): f16 384 1.26x, f32 256 1.12x (bags of 8 1.14x),
// f32 128 1.07x, f16 512 1.02x, f16 256 0.99-1.04x (5 rounds; 3-round runs before: 0.96-1.11x); 8
// or 16 rows ahead were no better. Tables in the LLC keep the heads too: whole rows 6-8 ahead there
// gave f16 256 bags 1.00-1.05x, f32 256 0.98x, f16 512 0.93x. Rows of 17 to 48 lines were added on
// a 32 MiB-L3 Zen 3 (AVX2, 7 rounds, against 4 whole rows ahead, or 2 rows' first 8 lines for f32
// 768): f16 768 bags of 8 1.16x, of 128 1.22x (3 runs of 5 rounds before: 1.05-1.17x), f16 1024
// 1.15x (1.07x), f32 768 1.14x, 1.17x (5-round runs: 0.98-1.09x). Wider rows keep the plan: f16
// 2048 1.08x [0.99-1.16], bf16 4096 0.98x. Quantized rows keep whole rows: int8 768 (776-byte rows)
// lost on the 480 MiB machine, 0.72-0.75x, and was 0.97-1.08x on the Zen 3.
constexpr std::uint64_t kBagHeadRowBytes = 48 * 64;
constexpr std::uint64_t kBagHeadDistance = 12;
constexpr std::uint64_t kBagHeadBytes = 2 * 64;
// Line 0 and the widest scale and bias (int8's) after it.
constexpr std::uint64_t kSecondLineParamsBytes = 64 + detail::row::params_bytes(DType::kInt8Rowwise);

template <DType TD>
inline PrefetchPlan bag_prefetch_plan(std::uint64_t table_row_bytes) {
  if (!kRowwiseQuantized<TD> && table_row_bytes > kNarrowRowBytes && table_row_bytes <= kBagHeadRowBytes) {
    return {kBagHeadDistance, kBagHeadBytes};
  }
  // Quantized rows of 72 to 128 bytes, whose scale and bias lie wholly in their second line, take
  // their first line: prefetch_row adds the second with the scale and bias. Those are the lines of
  // prefetch_plan's pair, yet bags of int8 64 pooled 0.82x [0.80-0.83] (of 32: 0.83x) as fast with
  // the pair's plan on the Zen 3 (bench/ab.py, 7 rounds, tables in 2 MiB pages); why is not known
  // (no counters in that VM). Rows of 68 bytes keep the pair: int8 dims 57-60, whose scale and bias
  // straddle the two lines, and int4 dims 121-128 (not measured). Rows that fit the registers take
  // the interleaved plan instead (interleaves_prefetch: int8 64 and int4 128 since 50b7e14), so
  // with AVX2 and AVX-512 this branch is left to int8 rows of 61-63 values and to the scalar build.
  if (kRowwiseQuantized<TD> && table_row_bytes >= kSecondLineParamsBytes && table_row_bytes <= kPairRowBytes) {
    return {kNarrowDistance, 64};
  }
  return prefetch_plan(table_row_bytes, kBagReach);
}

// Rows of more than one line that fit the registers (first measured on float rows of 2-4 lines that
// a plain request pools straight into an f32 output, pool_bags_in_registers: f32 dims 20-32 with
// SSE4.2, 24-64 with AVX2, 32-64 with AVX-512; 16-bit 40-64 with AVX2, 48-128 with AVX-512; now
// also int8 64 with AVX2, and with AVX-512 every dtype up to dim 256 and the chunk path: below)
// prefetch the whole row ahead (16 ids ahead until about 8 KiB of rows replaced it, below), each
// line after the first load of the same line of this row, as FBGEMM's EmbeddingSpMDM kernels do
// (the gather does so too since: interleaved_plan). Near the end of the call the id ahead is its
// last (a row already on its way), so the loop has no branch for it (FBGEMM branches to the
// current row instead). The plans above issue the prefetches at the top of each row's loop, behind
// a test of the distance. Measured on the 32 MiB-L3 Zen 3 (AVX2, bench/ab.py, 1 thread, tables 3.9x the LLC,
// 7 rounds, against bag_prefetch_plan's first line or pair 12 rows ahead): f32 64 bags of 8 / 32 /
// 128 1.15x / 1.12x / 1.07x, f16 64 bags of 8 / 32 1.19x / 1.24x, f32 32 and bf16 64 bags of 32
// 1.19x and 1.17x. Controls the change leaves alone: int8 64 1.03x, f32 256 0.90-1.02x in three
// runs, f16 256 bags of 32 0.88-0.93x in four (one binary against a copy of itself gave that case
// 0.89x [0.87-0.98] once and 1.01x once, and its pool_block is byte-identical: single runs move
// that much). With a run-time knob: whole rows 8 or 16 ahead at the top of the loop 0.88-1.09x,
// interleaved 12 ahead 1.06-1.21x, 16 ahead 1.11-1.18x (kept then: the higher low end, and FBGEMM's
// distance; interleaved_plan's since, below). Not measured with SSE4.2, nor on rows of 3 lines (f32 dim 48).
// With AVX-512, rows of up to 16 lines fit the registers, and on a 32 MiB-L3 Zen 5 (AVX-512 BF16,
// 5 rounds, against the first 2 lines 12 rows ahead, bag_prefetch_plan) they pool far faster so:
// f16 256 bags of 8 / 32 1.73x / 1.74x, f32 256 1.51x / 1.34x, f32 128 bags of 8 1.16x. (An older
// kernel prefetching every line of the row ahead, from pool_rows, lost f16 256 0.81-0.89x on the
// 480 MiB-LLC Intel machine: kernel_body.inl; this one was not measured there.) Quantized rows
// take it too, their scale and bias with the last line: see kRegisterVectors. So does a request
// that does not pool straight into registers (weighted, 16-bit output, rows with a tail, each
// normalized or not) when its rows fit them, on its first pass over a bag (pool_chunk): against the
// plans above, f16 256 mean + normalize bags of 8 / 32 2.88x / 2.83x, f16 256 -> bf16 2.80x, f32 64
// mean + normalize 1.96-2.31x; with AVX2 (forced, same machine) f32 64 1.87x, f16 64 1.29x (a plain
// normalized request went through pool_chunk then; it pools in the registers since fe8934f).
// The distance became the gather's interleaved_plan (about 8 KiB of rows, at least 4 rows: 32 ids
// ahead for 256-byte rows, 64 for 128-byte ones, 8 for 1 KiB) when the gather found narrow rows
// faster so on the Zen 5; against 16 ids (bench/ab.py, 1 thread, tables 3.9x the LLC, 5 rounds):
// f32 64 bags of 8 / 32 1.25x / 1.22x, mean + normalize 1.42x; f16 64 bags of 8 1.96x; int8 64 bags
// of 8 / 128 2.14x / 2.16x; int8 256 bags of 32 1.26x, f32 256 1.04x; controls (16 ids either way)
// f32 128 and f16 256 1.00x. 2 threads: f16 64 1.78x, int8 64 1.99x, f32 64 1.05x. AVX2 (forced):
// f32 64 bags of 8 1.30x, f16 64 and int8 64 bags of 32 1.98x and 2.16x.
constexpr std::uint64_t kInterleavedRowBytes = 16 * 64;

// Whether rows of `values` values (whole vectors) take the interleaved prefetch: asked at compile
// time by pool_bags_in_registers and at run time by pool_bags_on for the range's plan, the same rule.
// A row counts its scale and bias (FORMAT.md 4.2: after the codes, aligned to 4 bytes; int8's two
// f32, int4's two f16) in its lines: an int8 dim-64 row is two lines, and the second line is
// prefetched with the first. Measured on the Zen 5 (5 rounds, against its first line 12 rows ahead,
// bag_prefetch_plan): int8 64 bags of 8 / 32 1.177x / 1.181x, int4 128 1.202x, AVX2 (forced) int8 64
// 1.187x. (On the Zen 3 the pair 12 rows ahead, at the top of the loop, had lost: 0.82x.)
template <DType TD>
constexpr bool interleaves_prefetch(std::uint64_t values) {
  return detail::row::bytes(TD, values) > 64 && table_bytes<TD>(values) <= kInterleavedRowBytes;
}

// The ids of one bag and what pooling them needs.
template <DType TD, IdPath P>
struct Bag {
  static constexpr bool kPlain = P != IdPath::kGeneral;
  const PoolArgs& a;
  std::uint64_t first, last;  // ids [first, last)
  RowPrefetch ahead;
  RowStage* stage = nullptr;  // pool_rows pools the rows from here when set (stages_rows)

  __attribute__((always_inline)) std::uint64_t row_index(std::uint64_t i) const noexcept {
    if constexpr (kPlain) {
      return id_of_width<P == IdPath::kPlainWide>(a.ids.data, i);
    } else {
      return bag_row(a, i);
    }
  }
  __attribute__((always_inline)) const std::byte* row(std::uint64_t i) const noexcept {
    return a.token + row_index(i) * a.token_stride;
  }
  // The weight of id i, or nothing (the row is added as it is).
  __attribute__((always_inline)) bool weighted() const noexcept {
    return !kPlain && (a.weights != nullptr || a.id_weights != nullptr);
  }
  __attribute__((always_inline)) bool token_scaled() const noexcept { return !kPlain && a.token_scale != 1.0f; }
  __attribute__((always_inline)) bool max() const noexcept { return !kPlain && a.mode == PoolingMode::kMax; }
  __attribute__((always_inline)) float weight(std::uint64_t i) const noexcept {
    if (a.weights != nullptr) return a.weights[i];
    return a.id_weights[effective_id(a.ids, a.zero_outside_rows, i)];
  }
  // Calls f(combine) once, where combine(x, r, w, bag_first) is how a row's value x joins the running
  // sum or maximum r (w: the row's weight, 1 without; bag_first: the bag's first row): the operation
  // of the comment at the top, chosen here for the whole loop that f runs. Tested in the loop, as
  // before, GCC kept the tests there: a compare and two or three branches per vector of every row
  // of the general path. With an FMA instruction, its unweighted rows take fma(1, x, r), which is
  // r + x bit for bit, so only a token scale adds a variant. Against the tests in the loop (bench/
  // ab.py, Zen 5, 1 thread, tables 3.9x the LLC, 5 rounds, weighted sums, bench --weights): f16 256
  // bags of 32 1.13-1.17x, f16 64 1.09-1.11x, int4 256 1.14-1.18x, int4 768 1.22x, f32 768 bags of
  // 8 1.14x, int8 256 bags of 8 1.03x, f16 768 1.00-1.02x, int8 768 0.99-1.01x; AVX2 (forced) f16
  // 256 1.07x, int8 256 1.03x, f32 768 1.14x; max 1.00x. The scale multiplied in unconditionally
  // (x * 1 is x) lost the block passes 3-5% (int8 768 0.95x, f16 768 0.97x). Token maps and token
  // scales were not measured (bench has no flag for them): an unweighted mapped row now takes an
  // FMA where it took an add (a longer dependency per row; 8 or 16 sums in flight hide it).
  template <typename F>
  __attribute__((always_inline)) void with_combine(F&& f) const {
    using V = typename Traits::V;
    if constexpr (kPlain) {
      f([](V x, V r, V, bool) __attribute__((always_inline)) { return r + x; });
    } else {
      const bool scaled = token_scaled(), weighted = this->weighted();
      const V scale(a.token_scale);
      if (max()) {
        f([=](V x, V r, V, bool bag_first) __attribute__((always_inline)) {
          if (scaled) x = x * scale;
          return bag_first ? x : Traits::max_keep(x, r);
        });
      } else if constexpr (Traits::kHasFma) {
        if (scaled) {
          f([=](V x, V r, V w, bool) __attribute__((always_inline)) { return Traits::fma(w, x * scale, r); });
        } else {
          f([](V x, V r, V w, bool) __attribute__((always_inline)) { return Traits::fma(w, x, r); });
        }
      } else {
        f([=](V x, V r, V w, bool) __attribute__((always_inline)) {
          if (scaled) x = x * scale;
          return weighted ? Traits::fma(w, x, r) : r + x;
        });
      }
    }
  }
  // The row `ahead.distance` ids after id i, or the call's last one near its end.
  __attribute__((always_inline)) const std::byte* row_ahead_of(std::uint64_t i) const noexcept {
    const std::uint64_t k = i + ahead.distance;
    return this->row(k < ahead.ahead_end ? k : ahead.ahead_end - 1);
  }
  // Called with each id of the first pass: the row `ahead.distance` ids later starts arriving.
  __attribute__((always_inline)) void prefetch_ahead_of(std::uint64_t i) const noexcept {
    if (i + ahead.distance >= ahead.ahead_end) return;
    prefetch_row<TD>(this->row(i + ahead.distance), ahead.bytes, a.row_bytes, a.params_offset);
  }
  // Called with each id of a block pass over values [j, j + count) (AVX2, SSE4.2:
  // kInterleavesBlockPasses): the lines holding those values of the row `ahead.distance` ids later
  // start arriving, and with the first block a quantized row's scale and bias, which every pass
  // reads. Rows start on a line (FORMAT.md 4).
  __attribute__((always_inline)) void prefetch_columns_ahead_of(std::uint64_t i, std::uint64_t j,
                                                                std::uint64_t count) const noexcept {
    if (i + ahead.distance >= ahead.ahead_end) return;
    const std::byte* ahead_row = this->row(i + ahead.distance);
    for (std::uint64_t k = table_bytes<TD>(j) / 64 * 64; k < table_bytes<TD>(j + count); k += 64) {
      Traits::prefetch(ahead_row + k);
    }
    if constexpr (kRowwiseQuantized<TD>) {
      if (j == 0) Traits::prefetch(ahead_row + a.params_offset);
    }
  }
  // Copies the rows of ids [i, i + kStagedRows), up to the end of the call's range, into the stage.
  void restage(std::uint64_t i, bool prefetch) const noexcept {
    stage->fill(i, i + kStagedRows < ahead.ids_end ? i + kStagedRows : ahead.ids_end, a.row_bytes,
                [&](std::uint64_t k) {
                  if (prefetch) prefetch_ahead_of(k);
                  return RowStage::Source{this->row(k), nullptr};
                });
  }
};

// With AVX-512, a block pass over the rows (pool_block_passes, below) prefetches its columns of
// the row ahead line by line, each line after the first load from the same line of this row (as
// interleaves_prefetch's whole rows, and as FBGEMM's JIT kernels do), rather than all of them at
// the top of the row (Bag::prefetch_columns_ahead_of); the same distance, kBlockPassDistance ids.
// Measured on a 32 MiB-L3 Zen 5 host whose random rows read slowly (docs/BENCHMARKS.md: a second Zen 5 host;
// bench/ab.py, 1 thread, tables 3.9x the LLC, one output buffer, 7 rounds, against the top of the
// row; two runs): int8 768 bags of 8 / 32 / 128 1.015-1.049x / 1.114-1.129x / 1.107-1.116x, int8
// 512 bags of 32 1.095-1.100x, f16 768 bags of 8 / 32 1.030-1.046x / 1.010-1.020x, mean + normalize
// 1.005-1.040x, bf16 768 0.991-0.999x. AVX2 (forced) in every pass lost int8 256, bags of 8 / 32
// 0.889x / 0.968x, though f16 256 gained 1.069x: AVX2 and SSE4.2 keep the top of the row. Not
// measured on the faster Zen 5 host nor on Intel.
constexpr bool kInterleavesBlockPasses = Traits::kWidth == 16;

// The rows of a bag that one pass of pool_block pools: all of them, or a tile of them
// (pool_block_passes). A tile after the first adds to the sums a previous one stored in `out`
// (or the running maximum; stored and loaded as f32: the same operations), and only the last makes
// the result (the mean over the whole bag, the output scale).
struct RowTile {
  std::uint64_t from, to;  // ids [from, to)
};
template <DType TD, IdPath P>
inline RowTile whole_bag(const Bag<TD, P>& bag) noexcept {
  return {bag.first, bag.last};
}

// Divides a whole pooled vector of kVectors vectors, as an f32 output holds it, by its length: the
// same operations as the chunk path's add_squares and division (pool_bags_in_chunks), in registers.
// Its squares go to lane_ordered_sum's 16 lanes (vector v to lane vector v % (16 / W)) up to the
// last multiple of 16 values, the lanes are added in order, then the squares of the values past it,
// one by one. Against the chunk path, which stores the vector, reads it back for the squares and
// again for the division (bench/ab.py; see the commit).
template <std::uint64_t kVectors, typename V>
__attribute__((always_inline)) inline void normalize_in_registers(V* acc) {
  constexpr std::uint64_t W = Traits::kWidth;
  constexpr std::uint64_t kLaneVectors = kNormLanes / W;
  constexpr std::uint64_t kInLanes = kVectors / kLaneVectors * kLaneVectors;  // vectors below the last multiple of 16
  V lanes[kLaneVectors];
#pragma GCC unroll 32
  for (std::uint64_t l = 0; l < kLaneVectors; ++l) lanes[l] = V(0.0f);
#pragma GCC unroll 32
  for (std::uint64_t v = 0; v < kInLanes; ++v) lanes[v % kLaneVectors] = lanes[v % kLaneVectors] + acc[v] * acc[v];
  alignas(64) float values[kNormLanes];
#pragma GCC unroll 32
  for (std::uint64_t l = 0; l < kLaneVectors; ++l) Traits::store_f32(reinterpret_cast<std::byte*>(values + l * W), lanes[l], false);
  float squares = 0.0f;
  for (float x : values) squares += x;
  if constexpr (kInLanes < kVectors) {  // fewer than 16 values past the lanes (AVX2, SSE4.2)
#pragma GCC unroll 32
    for (std::uint64_t v = kInLanes; v < kVectors; ++v) {
      Traits::store_f32(reinterpret_cast<std::byte*>(values), acc[v], false);
      for (std::uint64_t k = 0; k < W; ++k) squares += values[k] * values[k];
    }
  }
  // A zero vector (an empty bag) stays zero.
  const V length(squares > 0.0f ? __builtin_sqrtf(squares) : 1.0f);
#pragma GCC unroll 32
  for (std::uint64_t v = 0; v < kVectors; ++v) acc[v] = acc[v] / length;
}

// Pools kVectors vectors from `j` (at most kRegisterVectors<TD>, or kWideBlockPassVectors<TD, P> in
// block passes) of every row of the bag into out[0, kVectors * W): the f32 operations of the
// comment above, before the normalization; or with it (`normalize`), when the block is the whole
// vector of an f32 output (pool_bags_in_registers). `stream`: the result's stores bypass the cache
// (`out` is vector-aligned: pool_bags_in_registers). The count is a template argument so that the
// accumulators stay in registers (with a run-time count GCC kept them on the stack: a load and a
// store per vector and row; and the loops over them are unrolled whole, 32 being at least every
// count, since a loop left partly rolled indexes them at run time, which put them on the stack
// too). kInterleaved: the block is the whole row (j == 0), and each of its lines is prefetched in
// the row ahead after the first load of the same line of this row (interleaves_prefetch). kTiled:
// only the bag's rows of `tile`, when pool_block_passes pools it in tiles; otherwise the whole bag,
// and no code for the tiles' loads and stores (with it in every pool_block, AVX-512 f16 768 bags of
// 8, which are never tiled, pooled 5% slower).
template <std::uint64_t kVectors, DType TD, IdPath P, bool kInterleaved = false, bool kTiled = false>
inline void pool_block(const Bag<TD, P>& bag, std::uint64_t j, float* out, bool first_pass, RowTile tile,
                       bool stream = false, bool normalize = false) {
  using V = typename Traits::V;
  constexpr std::uint64_t W = Traits::kWidth;
  constexpr std::uint64_t vectors = kVectors;
  static_assert(kVectors <= 32, "the unroll pragmas below");
  const PoolArgs& a = bag.a;
  const std::uint64_t from = kTiled ? tile.from : bag.first, to = kTiled ? tile.to : bag.last;
  const bool resumes = from != bag.first;  // the sums so far are in `out`
  const bool finishes = to == bag.last;    // the result is made
  V acc[kVectors];
#pragma GCC unroll 32
  for (std::uint64_t v = 0; v < kVectors; ++v) {
    acc[v] = resumes ? Traits::load_f32(reinterpret_cast<const std::byte*>(out + v * W)) : V(0.0f);
  }
  const bool weighted = bag.weighted();
  bag.with_combine([&](auto combine) __attribute__((always_inline)) {
    for (std::uint64_t i = from; i < to; ++i) {
      // The block's lines in the row ahead, each prefetched after the first load from the same
      // line of this row: the whole row (kInterleaved, j == 0), or a block pass's columns
      // (kInterleavesBlockPasses); else none.
      const std::byte* ahead_row = nullptr;
      if constexpr (kInterleaved) {
        ahead_row = bag.row_ahead_of(i);
      } else if (first_pass) {
        if (bag.ahead.block_passes) {
          if constexpr (kInterleavesBlockPasses) {
            ahead_row = bag.row_ahead_of(i);
            if constexpr (kRowwiseQuantized<TD>) {
              if (j == 0) Traits::prefetch(ahead_row + a.params_offset);
            }
            ahead_row += table_bytes<TD>(j);
          } else {
            bag.prefetch_columns_ahead_of(i, j, kVectors * W);
          }
        } else {
          bag.prefetch_ahead_of(i);
        }
      }
      const std::byte* row = bag.row(i);
      float qs, qb;
      row_quantization<TD>(row, a.params_offset, qs, qb);
      const V w(weighted ? bag.weight(i) : 1.0f);
      // The loads address the block's vectors from its first byte, as displacements. From the row,
      // at table_bytes(j + v * W), GCC kept every vector's offset in a register across the rows, and
      // 16-bit blocks of 16 vectors outnumbered the general registers: the offsets went to vector
      // registers, a vmovq before most loads (65 in the f16 kernel). It still did so for int8 blocks
      // (pool_block<24>: 23 offsets loaded from the stack and 9 vmovq a row), folding `block` back
      // into the row: the empty asm hides how `block` was made, so each load is `block` plus a
      // constant. Against without it (bench/ab.py, Zen 5, 1 thread, tables 3.9x the LLC, 5 rounds, two
      // runs): int8 768 bags of 8 / 32 / 128 1.03-1.04x / 1.02-1.03x / 1.02x, mean + normalize
      // 1.01-1.03x, int8 512 1.02x, int8 1024 1.00x; AVX2 (forced) int8 256 1.02x, f16 and int4 256
      // 1.01x; f16 768 (whose loads already took displacements) 1.01-1.02x. The interleaved whole
      // rows (j == 0) of the plain paths keep GCC's addressing: with the asm there too, int8 256
      // bags pooled 0.985x. The general path's take it (its int4 256 pool_block loaded 61 offsets
      // from the stack, 13 with it; two runs, weighted sums): int4 256 bags of 8 / 32 1.06x /
      // 1.07-1.08x, f32 256 1.06-1.07x, int8 256 1.03x, f16 256 1.00-1.01x, f16 64 0.99-1.00x.
      // Not measured: SSE4.2, the scalar build, rows of one line. j is a multiple of W, so even: an
      // int4 block starts on a byte.
      const std::byte* block = row + table_bytes<TD>(j);
      if constexpr (!kInterleaved || !Bag<TD, P>::kPlain) asm("" : "+r"(block));
      const bool bag_first = i == bag.first;
#pragma GCC unroll 32
      for (std::uint64_t v = 0; v < vectors; ++v) {
        const V x = load<TD>(block, v * W, qs, qb);
        if (kInterleaved || (kInterleavesBlockPasses && ahead_row != nullptr)) {
          prefetch_line_ahead<table_bytes<TD>(W)>(ahead_row, table_bytes<TD>(v * W));
        }
        acc[v] = combine(x, acc[v], w, bag_first);
      }
      if constexpr (kInterleaved && kRowwiseQuantized<TD>) Traits::prefetch(ahead_row + a.params_offset);
    }
  });
  if (!finishes) {  // the sums so far
#pragma GCC unroll 32
    for (std::uint64_t v = 0; v < vectors; ++v) {
      Traits::store_f32(reinterpret_cast<std::byte*>(out + v * W), acc[v], false);
    }
    return;
  }
  const std::uint64_t n = bag.last - bag.first;
  const bool mean = a.mode == PoolingMode::kMean && n > 0;
  // Read once, before the stores: `out` might alias `a` for all GCC knows, and it read the scale
  // again after every store, a load and two branches per vector of every bag.
  const float output_scale = a.output_scale;
  const bool scaled = output_scale != 1.0f;
  const V count(static_cast<float>(n)), scale(output_scale);
  // One test of each flag a bag, each a loop of its own: in one loop GCC tested all three for
  // every vector (AVX-512 f32 256: 16 x 9 instructions a bag, as many as two of its rows take).
  if (mean) {
#pragma GCC unroll 32
    for (std::uint64_t v = 0; v < vectors; ++v) acc[v] = acc[v] / count;
  }
  if (scaled) {
#pragma GCC unroll 32
    for (std::uint64_t v = 0; v < vectors; ++v) acc[v] = acc[v] * scale;
  }
  if (normalize) normalize_in_registers<kVectors>(acc);
  if (stream) {
#pragma GCC unroll 32
    for (std::uint64_t v = 0; v < vectors; ++v) Traits::store_f32(reinterpret_cast<std::byte*>(out + v * W), acc[v], true);
  } else {
#pragma GCC unroll 32
    for (std::uint64_t v = 0; v < vectors; ++v) Traits::store_f32(reinterpret_cast<std::byte*>(out + v * W), acc[v], false);
  }
}

// pool_block for a run-time count of 1 to sizeof...(kMinusOne) vectors.
template <bool kInterleaved = false, bool kTiled = false, DType TD, IdPath P, std::size_t... kMinusOne>
inline void pool_block_of(const Bag<TD, P>& bag, std::uint64_t j, std::uint64_t vectors, float* out, bool first_pass,
                          RowTile tile, std::index_sequence<kMinusOne...>) {
  (void)((vectors == kMinusOne + 1
              ? (pool_block<kMinusOne + 1, TD, P, kInterleaved, kTiled>(bag, j, out, first_pass, tile), true)
              : false) ||
         ...);
}

// The same for `vectors` whole vectors from `j` (more than a block), accumulated in
// out[0, vectors * W): for each element the same operations in the same order as pool_block.
// Rows of quantized tables, and of others of at least 1 KiB, are taken kRowGroup at a time: each
// vector's sum is loaded once, the group's rows added to it in order, and stored once, so a row
// costs the L1 a quarter of a load and a store per vector, and the group's rows are read side by
// side (their misses overlap). Measured (bench/ab.py, 1 thread, bags of 32, tables 4.3x the 480
// MiB LLC, 5 rounds, grouped / one row at a time): int8 768 1.84x, int8 256 1.11x, f16 768 1.11x
// (bags of 8 1.15x), f16 512 1.40x, f32 768 1.11x, f32 256 1.07x; cached f32 768 1.08x, int8
// 1.00x. Narrower 16-bit rows lost, f16 256 0.89x and f16 384 0.98x, and stay one at a time.
// Chunks of at least kWideGroupVectors vectors go eight rows at a time, then four, then one
// (against four at a time, 3 rounds: f16 768 1.05-1.15x, int8 768 1.06-1.10x, f32 768 bags of 8
// 1.04x, cached bags of 12 1.05x, int4 768 1.00x; all eight at a time lost int8 256, 0.84x).
constexpr std::uint64_t kRowGroup = 4;
constexpr std::uint64_t kWideRowGroup = 8;
constexpr std::uint64_t kWideGroupVectors = 512 / Traits::kWidth;  // 512 values (a row of dim >= 512), every ISA
constexpr std::uint64_t kGroupedFloatRowBytes = 1024;

template <DType TD>
constexpr bool pools_rows_in_groups(std::uint64_t table_row_bytes) {
  return kRowwiseQuantized<TD> || table_row_bytes >= kGroupedFloatRowBytes;
}

template <DType TD, IdPath P>
inline void pool_rows(const Bag<TD, P>& bag, std::uint64_t j, std::uint64_t vectors, float* out, bool first_pass) {
  using V = typename Traits::V;
  constexpr std::uint64_t W = Traits::kWidth;
  const PoolArgs& a = bag.a;
  std::byte* acc = reinterpret_cast<std::byte*>(out);
  const auto acc_at = [&](std::uint64_t v) { return Traits::load_f32(acc + 4 * v * W); };
  // The bag's first rows are added to sums that start at zero in registers, not to zeros stored
  // first, and a plain sum's last store is its result (no pass to divide or scale): an empty bag's
  // sums are stored as zeros at the end. Against zeroing first and a final pass (bench/ab.py, 32
  // MiB-L3 Zen 3, AVX2, 1 thread, tables 3.9x the LLC, bags of 8, 7 rounds, one output buffer):
  // f32 768 1.16x, int8 768 1.12x, f32 256 1.14x, f16 768 1.04x; bags of 32 1.01-1.04x; with
  // outputs rotating through 4x the LLC (5 rounds) f32 768 1.18x, int8 768 1.22x, f32 256 1.10x;
  // mean + normalize f32 768 1.07x. (Every path adds the rows in order from bag.first, so the
  // first group is the one that starts at it.)
  const bool weighted = bag.weighted();
  // Rows [i, i + kRows) added to the sums, each in turn, a vector at a time: one row (narrow rows,
  // a group's leftovers) or a group. Forced inline: GCC stopped inlining it once it had several
  // call sites, which cost f16 256 and 384 bags 14-16%.
  const auto add_rows = [&]<std::uint64_t kRows>(std::uint64_t i, auto row_of, bool prefetch)
                            __attribute__((always_inline)) {
    const std::byte* rows[kRows];
    float qs[kRows], qb[kRows];
    V w[kRows];
#pragma GCC unroll 8
    for (std::uint64_t g = 0; g < kRows; ++g) {
      if (prefetch) bag.prefetch_ahead_of(i + g);
      rows[g] = row_of(i + g);
      row_quantization<TD>(rows[g], a.params_offset, qs[g], qb[g]);
      w[g] = V(weighted ? bag.weight(i + g) : 1.0f);
    }
    bag.with_combine([&](auto combine) __attribute__((always_inline)) {
      const auto add_to = [&](V r, std::uint64_t v) __attribute__((always_inline)) {
#pragma GCC unroll 8
        for (std::uint64_t g = 0; g < kRows; ++g) {
          r = combine(load<TD>(rows[g], j + v * W, qs[g], qb[g]), r, w[g], i + g == bag.first);
        }
        Traits::store_f32(acc + 4 * v * W, r, false);
      };
      if (i == bag.first) {
        for (std::uint64_t v = 0; v < vectors; ++v) add_to(V(0.0f), v);
      } else {
        for (std::uint64_t v = 0; v < vectors; ++v) add_to(acc_at(v), v);
      }
    });
  };
  if (bag.stage != nullptr) {
    const RowStage& stage = *bag.stage;
    const auto staged_row = [&](std::uint64_t i) { return stage.row(i); };
    for (std::uint64_t i = bag.first; i < bag.last;) {
      if (i < stage.first || i >= stage.last) bag.restage(i, first_pass);
      const std::uint64_t end = stage.last < bag.last ? stage.last : bag.last;
      for (; i + kRowGroup <= end; i += kRowGroup) add_rows.template operator()<kRowGroup>(i, staged_row, false);
      for (; i < end; ++i) add_rows.template operator()<1>(i, staged_row, false);
    }
  } else {
    const auto table_row = [&](std::uint64_t i) { return bag.row(i); };
    std::uint64_t i = bag.first;
    if (pools_rows_in_groups<TD>(a.row_bytes)) {
      if (vectors >= kWideGroupVectors) {
        for (; i + kWideRowGroup <= bag.last; i += kWideRowGroup) {
          add_rows.template operator()<kWideRowGroup>(i, table_row, first_pass);
        }
      }
      for (; i + kRowGroup <= bag.last; i += kRowGroup) add_rows.template operator()<kRowGroup>(i, table_row, first_pass);
    }
    for (; i < bag.last; ++i) add_rows.template operator()<1>(i, table_row, first_pass);
  }
  if (bag.first == bag.last) {  // an empty bag: no group stored its sums
    for (std::uint64_t v = 0; v < vectors; ++v) Traits::store_f32(acc + 4 * v * W, V(0.0f), false);
  }
  const std::uint64_t n = bag.last - bag.first;
  const bool mean = a.mode == PoolingMode::kMean && n > 0;
  const float output_scale = a.output_scale;  // read once (pool_block)
  const bool scaled = output_scale != 1.0f;
  if (!mean && !scaled) return;  // the sums are the result
  const V count(static_cast<float>(n)), scale(output_scale);
  for (std::uint64_t v = 0; v < vectors; ++v) {
    V r = mean ? acc_at(v) / count : acc_at(v);
    if (scaled) r = r * scale;
    Traits::store_f32(acc + 4 * v * W, r, false);
  }
}

// The same, one value at a time, for the values past the last whole vector.
template <DType TD, IdPath P>
inline float pool_one(const Bag<TD, P>& bag, std::uint64_t j) {
  const PoolArgs& a = bag.a;
  float acc = 0.0f;
  const bool weighted = bag.weighted();
  for (std::uint64_t i = bag.first; i < bag.last; ++i) {
    const std::byte* row = bag.row(i);
    float qs, qb;
    row_quantization<TD>(row, a.params_offset, qs, qb);
    float x = load_one<TD>(row, j, qs, qb);
    if (a.token_scale != 1.0f) x = x * a.token_scale;
    if (a.mode == PoolingMode::kMax) {
      acc = i == bag.first || x > acc ? x : acc;
    } else {
      acc = weighted ? __builtin_fmaf(bag.weight(i), x, acc) : acc + x;
    }
  }
  const std::uint64_t n = bag.last - bag.first;
  if (a.mode == PoolingMode::kMean && n > 0) acc = acc / static_cast<float>(n);
  if (a.output_scale != 1.0f) acc = acc * a.output_scale;
  return acc;
}

// With 16 vector registers (AVX2, SSE4.2), a chunk of more than kRegisterVectors vectors of 16-bit
// or quantized rows of at most kBlockPassRowBytes is pooled in blocks of kBlockPassVectors<TD>,
// each block one pass of pool_block over the bag's rows, or over a tile of them (below; their later
// columns come from L1 or L2 in the later passes), each pass prefetching its own columns of the row kBlockPassDistance ids ahead,
// as FBGEMM's EmbeddingSpMDM kernels do. pool_rows' loop is a load, an add and a store per vector
// and row, so the core's window held little more than one 512-byte f16 row and the misses of
// successive rows hardly overlapped: f16 256 bags pooled 3.5 M rows/s, no faster than f32 rows of
// twice the bytes, where embedrt_random_rows_probe reads 8.8 M such rows/s. A block pass takes
// about 20 instructions a row. Measured (bench/ab.py, 32 MiB-L3 Zen 3, AVX2 unless said, 1 thread,
// tables 3.9x the LLC, 5-7 rounds, block passes / pool_rows): f16 256 bags of 8, 32, 128 2.22x,
// 2.10x, 2.04x; mean + normalize 2.22x; cached (0.4x the LLC) 3.42x; bf16 256 2.16x; f16 128 1.80x;
// int8 256 1.29x, 1.28x, 1.31x (A bimodal: IQRs up to 0.70-1.40); int8 128 1.22x; int4 256 1.41x,
// 1.14x; SSE4.2 f16 256 2.26x, int8 256 1.26x. Wider rows lost: f16 512 0.76x, f16 768 0.83x
// (bags of 8 1.06x), int8 768 0.76x; f32 rows too (f32 256 0.8x, f32 768 0.6x in a 3-round sweep),
// so they keep pool_rows. 8, 12 and 16 ids ahead were within the noise of each other.
// With AVX-512, 16-bit and int8 rows wider than the registers, up to a chunk (kChunkFloats values),
// go in blocks of 16 vectors (int8 since in blocks of 24, 16-bit rows of more than 32 vectors in
// blocks of 30, 28 on the general id path: below). Measured on a 32 MiB-L3 Zen 5 (AVX-512 BF16, 1
// thread, tables 3.9x the LLC, 5 rounds, against pool_rows): f16 768 bags of 8 / 32 1.16x / 1.22x,
// mean + normalize 1.25x; int8 768 1.60x / 1.10x; f16 512 1.33x. f32 and int4 rows lost and keep
// pool_rows: f32 768 0.69x, int4 768 0.94x. 16 ids ahead against 12: 0.97-1.09x. bf16 (decoded as
// f16 is, by a shift) and rows of 769-1024 values were not measured. Again with 16-bit blocks of 30
// and int8 blocks of 24 (at dcd7c69, 5 rounds, against 12): 16 ahead 0.94-1.00x (int8 768 bags of
// 32 0.94x); 8 ahead 0.83-1.05x (f16 768 bags of 8 1.05x, of 128 0.96x; int8 768 bags of 32 0.83x).
// Blocks of 12 vectors (12 of the 16 registers hold sums; the last block what is left) against
// blocks of 8 (5 rounds): f16 256 bags of 8, 32, 128 1.01x, 1.34x, 1.39x; int8 256 1.19x, 1.05x,
// 1.15x; f16 128 1.06x; mean + normalize 1.11x; but int4 256 0.95x [0.95-0.96] (its decoding holds
// 2 more registers), which keeps blocks of 8. AVX-512 takes blocks of 16, half its registers, but
// int8 blocks of 24 (FBGEMM's JIT kernels take as many as the registers hold, 29-31): against 16 on
// the Zen 5 (5 rounds, one output buffer, before the tiles below) int8 768 bags of 8 / 32 / 128
// 1.10x / 1.28x / 1.30x, int8 1024 1.22x, int8 512 1.04x. 16-bit blocks of 24 were no clear gain
// (f16 768 1.02x / 1.06x / 1.04x, another run 0.99x; f16 512, 640, 1024 1.00-1.02x; beside the
// tiles 0.96-1.01x) and stayed 16 (until blocks of 30, below, with fixed load offsets). Blocks of
// 28 were no faster (0.96-1.02x), nor an even split into as few blocks of at most 24 (int8 1024
// 1.10x where 24, 24, 16 gave 1.22x). f32 rows in blocks of 24 lost as in blocks of 16 (f32 768
// 0.68-0.75x).
//
// A bag of more than kBlockPassDistance ids is pooled in tiles of that many rows, every block's pass
// over a tile before the next tile (pool_block's from and to), when a block is at most
// kTiledBlockBytes of each row: at most 6 lines of each of 12 rows, where a whole bag's pass had read up
// to 128 rows before the next pass read them again from further away. Against whole-bag passes
// (bench/ab.py, Zen 5, 1 thread, tables 3.9x the LLC, 5 rounds, one output buffer): AVX-512 int8
// 768 bags of 32 / 128 1.17x / 1.24x, int8 1024 1.23x / 1.36x, int8 512 bags of 32 1.14x; AVX2
// (forced) int8 256 bags of 32 / 128 1.36x / 1.82x, f16 256 1.38x / 1.54x, int4 256 1.28x, int8 448
// 1.67x; bags of 8 (not tiled) 1.00x. Tiles of 12 against 8: 1.03-1.04x; of 4 0.93-0.97x; of 16 were
// slower than 8. AVX-512's 16-bit blocks (8 lines of each row; 12 in blocks of 24) lost with tiles:
// f16 768 bags of 128 0.94x (0.91x), bags of 32 1.00x (0.94x), bf16 768 (0.95x); they keep
// whole-bag passes. Why the two differ is not known (no counters in the VM). With both changes,
// against the kernel before them (same runs' conditions): AVX-512 int8 768 bags of 8 / 32 / 128
// 1.06x / 1.48x / 1.64x; AVX2 int8 256 1.39x / 1.80x, f16 256 1.36x / 1.50x, int4 256 1.28x, int8
// 448 1.63x; SSE4.2 int8 256 1.49x; controls (f16 768 on AVX-512, f32 256 and 768, f16 256 in
// registers, AVX2 f16 bags of 8) 0.99-1.01x.
constexpr std::uint64_t kBlockPassRowBytes = 8 * 64;
constexpr std::uint64_t kBlockPassDistance = 12;
template <DType TD>
constexpr std::uint64_t kBlockPassVectors = Traits::kWidth == 16 ? (TD == DType::kInt8Rowwise ? 24 : 16)
                                            : TD == DType::kInt4Rowwise ? 8
                                                                        : 12;
// AVX-512 16-bit rows of more than two such blocks (dims 528-1024) of a plain request go in blocks
// of 30 vectors, as many as the registers hold beside the load's and a spare (FBGEMM's JIT kernels
// take 31): f16 768 in passes of 30 and 18 vectors (15 and 9 lines of each row) rather than three
// of 16. Against blocks of 16 (bench/ab.py, Zen 5, 1 thread, tables 3.9x the LLC, 5 rounds, one
// output buffer, after 64155d6): f16 768 bags of 8 / 32 / 128 1.028x / 1.041x / 1.033x, mean +
// normalize 1.021x, bf16 768 1.059x, f16 528 1.057x, f16 1024 1.043x; controls f16 512 (16s either
// way) 1.013x, int8 768 1.005x. An earlier run: f16 640 1.036x; each line of the row ahead
// prefetched after the load of the same line of this row, 16 ids ahead, as FBGEMM's do, was no
// further gain (1.015x to 1.068x against 1.007x to 1.073x without). Rows of 32 vectors keep two
// passes of 16: one of 30 and one of 2 pooled f16 512 0.937x. The general id path takes blocks of
// 28: its weight and token scale are two more live registers (with blocks of 30, while it still
// tested the request per vector, GCC left accumulators on the stack: 108 and 128 zmm stack accesses
// in its f16 and bf16 pool_bags_on, against 7 and 8; 30 was not tried again since). It kept blocks
// of 16 until the request was chosen once per loop (Bag::with_combine); since, 28 (18 zmm stack
// accesses left in its pool_block<28>) against 16 (bench/ab.py, Zen 5, 1 thread, tables 3.9x the
// LLC, 5 rounds, weighted sums, two runs): f16 768 bags of 8 / 32 / 128 1.05x / 1.10-1.18x /
// 1.06-1.08x, mean + normalize 1.10x, f16 1024 1.11-1.12x, bf16 768 1.09x. Blocks of 24 (no stack
// accesses, where 28 has 18) gained less: 1.04x / 1.05x / 1.05x, f16 1024 1.10x.
// AVX-512 over 16-bit (f16 or bf16) rows: the wide blocks below and memory_block_passes are theirs.
template <DType TD>
constexpr bool kHalfRowsIn512 = Traits::kWidth == 16 && (TD == DType::kF16 || TD == DType::kBF16);
template <DType TD, IdPath P>
constexpr std::uint64_t kWideBlockPassVectors =
    kHalfRowsIn512<TD> ? (P != IdPath::kGeneral ? 30 : 28) : kBlockPassVectors<TD>;
constexpr std::uint64_t kTiledBlockBytes = 6 * 64;
template <DType TD, std::uint64_t kBlock = kBlockPassVectors<TD>>
constexpr bool kTilesBlockPasses = table_bytes<TD>(kBlock * Traits::kWidth) <= kTiledBlockBytes;

// AVX-512 16-bit rows of 13 to 24 vectors (dims 208-384, 416-768 bytes) from a table larger than
// half the LLC (PoolArgs::token_rows_from_memory) go in block passes of 12 vectors (6 lines) over
// tiles of 12 rows, as int8 rows of that size do, where they would be pooled in registers in one
// pass (up to 16 vectors; since, those go so only in the L2 kernel set: below) or in untiled
// blocks of 16. One core keeps more of such rows in flight
// so: f16 256 rows pooled about 144 M lines a second where f32 256 and int8 256 pooled 210-275 M,
// and embedrt_random_rows_probe reads 26 M such rows a second into L2 against the 18-19 M rows
// the registers pooled. Measured (bench/ab.py, Zen 5, 1 thread, tables 3.9x the LLC, one output
// buffer, 5 rounds, against the kernel before): f16 256 bags of 8 / 32 / 128 1.10x / 1.19x / 1.26x,
// mean + normalize 1.13x, bf16 256 1.17x, f16 224 1.10x, f16 320 1.11x, f16 384 1.13x. Two cores
// read these rows as fast as this host's memory gives them either way (about 40 M rows of 512 bytes
// a second), and there the narrower passes lose a little (2 threads, wall clock, 7 rounds): f16 256
// bags of 8 / 32 / 128 0.970x / 0.975x / 0.997x, bf16 256 0.979x. Tables in the LLC keep the
// registers: model2vec's size (29525 x 256 f16, mean + normalize) bags of 32 pooled 0.88x so.
// Again as landed, against 858ae17 (copies of both binaries; 2 threads by wall clock): 1 thread f16
// 256 bags of 8 / 32 / 128 1.135x / 1.188x / 1.242x, bf16 320 1.096x, controls f16 768 1.001x, f32
// 256 0.983x; 2 threads bags of 8 1.085x, bf16 320 1.119x, bags of 32 / 128 0.89-1.25x by round:
// the kernel before ran at either ~37 M or ~52 M ids a second as the host's other load came and
// went, these passes at 43-51 M either way. The model2vec size, 2 threads: 1.000x.
// Tried and not kept: the first pass prefetching the whole row ahead (later passes none) gained
// less with 1 thread (1.02-1.14x) and lost as much with 2; the registers' row ahead 24 or 32 rows
// ahead instead of 16: 0.96-1.02x.
// That host's random reads are slow (PrefetchLevel::kAuto's calibration there: random rows at 9.6
// GB/s prefetched into L1, 17.2 into L2, so the L2 set). On a third Zen 5 whose reads are fast
// (25.9 and 24.5 GB/s, so the L1 set) the passes lost to the registers (bench/ab.py, 1 thread, cpu
// clock, tables 3.9x the LLC, one output buffer, 5 rounds, registers / passes, 2637a34): f16 256
// bags of 8 / 32 / 128 1.124x / 1.164x / 1.161x, mean + normalize 1.149x, bf16 256 1.182x, f16 224
// bags of 8 1.034x; 2 threads (wall clock, 7 rounds) 1.091x / 1.182x / 1.160x; with the L2 set
// forced there 1.046x. So rows that fit the registers take the passes only in the L2 set
// (kPrefetchesIntoL2), the set a host with slow reads runs; wider rows take them in both: there f16
// 384 in untiled blocks of 16 against the passes ran 0.987x [0.97-0.99]. On the 480 MiB-LLC Xeon,
// which takes the L2 set, the registers against the passes (tables 3.6x the LLC, rows touched
// 2.4x, 1 thread) had no direction for sums (f16 256 bags of 8 / 32 / 128 0.995x / 1.129x / 1.161x
// in 5 rounds, then 0.984x / 1.143x / 0.887x in 7, each of those IQRs spanning 1) and lost mean +
// normalize bags of 8 (0.844x, 0.810x): the L2 set keeps the passes.
constexpr std::uint64_t kMemoryBlockPassVectors = 12;
static_assert(kTilesBlockPasses<DType::kF16, kMemoryBlockPassVectors>);
template <DType TD>
inline bool memory_block_passes(const PoolArgs& a, std::uint64_t row_vectors) noexcept {
  return kHalfRowsIn512<TD> && a.token_rows_from_memory && row_vectors > kMemoryBlockPassVectors &&
         row_vectors <= 2 * kMemoryBlockPassVectors &&
         (kPrefetchesIntoL2<Traits> || row_vectors > kRegisterVectors<TD>);
}
// Such rows in bags shorter than two tiles on the average (fewer than 24 ids) are prefetched 24 ids
// ahead rather than 12: there a bag's two passes end before the rows 12 ids ahead have arrived.
// Measured (bench/ab.py, Zen 5, tables 3.9x the LLC, one output buffer, 5 rounds, the distance from
// an environment knob in a throwaway build, 1 thread): 24 against 12, f16 256 bags of 8 1.057x, of 12
// 1.031x, of 16 1.026x, bags of 8 mean + normalize 1.030x, bf16 320 bags of 8 1.069x (2 threads,
// wall clock, 7 rounds: f16 256 bags of 8 1.045x, bf16 320 1.056x); bags of 4 1.017x, with mean +
// normalize 0.976x (IQR 0.90-1.00); longer bags lose with it, f16 256 bags of 32 / 128 0.991x-1.021x
// / 0.965x-0.989x (16 and 32 ahead measured alike), and keep 12. On an Intel Xeon with AVX-512 FP16
// and a 300 MiB L3 (tables 8x it, 1 thread, 9 rounds) the same change against 12 measured 0.998x for
// f16 256 bags of 8, 0.994x for bf16 320, 0.981x for bags of 16 (2 threads: 0.995x, 0.981x, 0.986x):
// a gain on one host, within 2% on the other, so it stays; a per-host distance would need both.
constexpr std::uint64_t kShortBagDistance = 2 * kBlockPassDistance;
inline std::uint64_t memory_block_distance(std::uint64_t ids, std::uint64_t bags) noexcept {
  return ids < kShortBagDistance * bags ? kShortBagDistance : kBlockPassDistance;
}

// How far ahead a block pass prefetches its columns of the row ahead: `distance` ids, or for 16-bit
// rows of up to 1 KiB the calibrated floor when it is further (PoolArgs::min_rows_ahead: 32 rows on
// a host whose random reads gain from more rows in flight, else 4, below every distance here), as
// the interleaved rows take it. Measured on the 480 MiB-LLC Xeon, whose calibration chose 32
// (bench/ab.py, one binary with --min-rows-ahead 4, the distances before, against 32; 1 thread, cpu
// clock, tables 3.6x the LLC, rows touched 2.5x, 5 rounds): f16 256 bags of 8 / 32 / 128 1.048x /
// 1.284x / 1.283x, mean + normalize bags of 8 1.100x, bf16 320 1.088x; AVX2 (forced) f16 256 bags of
// 32 1.193x. 64 rows against 32 (7 rounds): f16 256 0.97-0.99x, bf16 320 1.09x. int8 rows keep their
// distance: int8 768 bags of 8 / 32 / 128 lost 0.942x / 0.931x / 0.930x with 32 (int8 512 1.044x).
template <DType TD>
constexpr std::uint64_t block_pass_distance(std::uint64_t distance, std::uint64_t table_row_bytes,
                                            std::uint64_t min_rows) {
  return kRowwiseQuantized<TD> ? distance : floored_rows_ahead(distance, table_row_bytes, min_rows);
}

// The vectors of a block for rows of `vectors` vectors.
template <DType TD, IdPath P>
constexpr std::uint64_t block_pass_vectors(std::uint64_t vectors, bool memory_blocks) {
  if (memory_blocks) return kMemoryBlockPassVectors;
  return vectors > 2 * kBlockPassVectors<TD> ? kWideBlockPassVectors<TD, P> : kBlockPassVectors<TD>;
}
// Such a row is one chunk (int4 holds 2 codes a byte; AVX-512 and int8 rows ask for at most
// kChunkFloats values), so only the first chunk's pass prefetches.
static_assert(2 * kBlockPassRowBytes <= kChunkFloats);

template <DType TD>
constexpr bool kPoolsInBlockPasses = ((Traits::kWidth == 4 || Traits::kWidth == 8) && TD != DType::kF32) ||
                                      (Traits::kWidth == 16 && TD != DType::kF32 && TD != DType::kInt4Rowwise);

// Whether rows of `dim` values (`table_row_bytes` with a quantized row's scale and bias) of more
// vectors than the registers pool go in block passes: see kBlockPassRowBytes. int8 rows of up to a
// chunk do with AVX2 and SSE4.2 too, since tiles keep a tile's 12 rows (10 KiB of int8 768) in L1
// for every pass; pool_rows reads 8 rows side by side, yet from memory pooled them at 53-60% of the
// bag roofline (why is not known: no counters in that VM). Measured on a 32 MiB-L3 Zen 3
// (bench/ab.py, 1 thread, tables 3.7-4.2x the LLC, one output buffer, 5 rounds, against pool_rows):
// AVX2 int8 768 bags of 8 / 32 / 128 1.45x / 1.56x / 1.58x (2 threads, wall clock, 7 rounds: 1.48x
// / 1.57x / 1.50x), outputs rotating 1.45x, mean + normalize 1.53x, weighted 1.36x, int8 512 1.49x,
// int8 600 1.52x, int8 1000 (a tail) 1.44x, int8 1024 1.51x; cached (0.1x the LLC) 1.03-1.06x;
// SSE4.2 (forced) int8 768 1.34x / 1.37x, cached 1.00x; controls int8 256, f16 768 1.01-1.02x. (The
// int8 768 0.76x above was before tiles.) 16-bit rows so lost in the LLC: f16 768 cached 0.82x, f16
// 512 0.86x, bf16 768 at 0.4x the LLC 0.93x, and f16 1000 from memory 0.92x, while f16 768 and 512
// from memory gained 1.01-1.04x and bf16 768 1.21x; they keep pool_rows. Short bags' block passes 24
// ids ahead rather than 12 (memory_block_distance) gave int8 768 bags of 8 / 16 1.03x / 1.01x.
template <DType TD>
constexpr bool takes_block_passes(std::uint64_t dim, std::uint64_t table_row_bytes) {
  if constexpr (!kPoolsInBlockPasses<TD>) {
    return false;
  } else if constexpr (Traits::kWidth == 16 || TD == DType::kInt8Rowwise) {
    return dim <= kChunkFloats;
  } else {
    return table_row_bytes <= kBlockPassRowBytes;
  }
}

// The block passes' prefetch plan, `distance` ids ahead (kBlockPassDistance, or for memory block
// passes memory_block_distance's), for the range's first rows: the first block's lines, or the
// row's where it is shorter than a block (AVX-512 int8 dims 272-312: 5 lines with the scale and
// bias, where a block is 6).
template <DType TD>
constexpr PrefetchPlan block_pass_plan(std::uint64_t table_row_bytes, std::uint64_t block_vectors,
                                       std::uint64_t distance) {
  const std::uint64_t block_bytes = whole_lines(table_bytes<TD>(block_vectors * Traits::kWidth));
  const std::uint64_t row_bytes = whole_lines(table_row_bytes);
  return {distance, block_bytes < row_bytes ? block_bytes : row_bytes};
}

template <std::uint64_t kBlock, DType TD, IdPath P>
inline void pool_block_passes_of(const Bag<TD, P>& bag, std::uint64_t j, std::uint64_t vectors, float* out,
                                 bool first_pass) {
  constexpr std::uint64_t W = Traits::kWidth;
  constexpr bool kTiled = kTilesBlockPasses<TD, kBlock>;
  const std::uint64_t first = bag.first, last = bag.last;
  for (std::uint64_t from = first;;) {  // once, for an empty bag too
    const bool finishes = !kTiled || last - from <= kBlockPassDistance;
    const RowTile tile{from, finishes ? last : from + kBlockPassDistance};
    std::uint64_t v = 0;
    for (; v + kBlock <= vectors; v += kBlock) {
      pool_block<kBlock, TD, P, false, kTiled>(bag, j + v * W, out + v * W, first_pass, tile);
    }
    if (v < vectors) {
      pool_block_of<false, kTiled>(bag, j + v * W, vectors - v, out + v * W, first_pass, tile,
                                   std::make_index_sequence<kBlock>());
    }
    if (finishes) return;
    from = tile.to;
  }
}

template <DType TD, IdPath P>
inline void pool_block_passes(const Bag<TD, P>& bag, std::uint64_t j, std::uint64_t vectors, float* out,
                              bool first_pass) {
  if constexpr (kHalfRowsIn512<TD>) {
    if (bag.ahead.block_vectors == kMemoryBlockPassVectors) {
      return pool_block_passes_of<kMemoryBlockPassVectors>(bag, j, vectors, out, first_pass);
    }
  }
  if (bag.ahead.block_vectors != kBlockPassVectors<TD>) {
    return pool_block_passes_of<kWideBlockPassVectors<TD, P>>(bag, j, vectors, out, first_pass);
  }
  pool_block_passes_of<kBlockPassVectors<TD>>(bag, j, vectors, out, first_pass);
}

// Values [c, c + count) of the pooled vector (before normalization) into chunk[0, count).
// `first_pass`: the first time this bag's rows are read (prefetch the rows ahead).
template <DType TD, IdPath P>
inline void pool_chunk(const Bag<TD, P>& bag, std::uint64_t c, std::uint64_t count, float* chunk, bool first_pass) {
  constexpr std::uint64_t W = Traits::kWidth;
  const std::uint64_t whole = count / W * W;
  if (kPoolsInBlockPasses<TD> && bag.ahead.block_passes) {  // (folded away where never; the row is this chunk)
    pool_block_passes(bag, c, whole / W, chunk, first_pass);
  } else if (whole / W > kRegisterVectors<TD>) {
    pool_rows(bag, c, whole / W, chunk, first_pass);
  } else if (whole > 0 && first_pass && bag.ahead.interleaved) {  // the whole row (c == 0), read the first time
    pool_block_of<true>(bag, c, whole / W, chunk, first_pass, whole_bag(bag),
                        std::make_index_sequence<kRegisterVectors<TD>>());
  } else if (whole > 0) {
    pool_block_of(bag, c, whole / W, chunk, first_pass, whole_bag(bag),
                  std::make_index_sequence<kRegisterVectors<TD>>());
  }
  for (std::uint64_t k = whole; k < count; ++k) chunk[k] = pool_one(bag, c + k);
}

// Adds the squares of chunk[0, count), values [c, c + count) of the vector, in lane_ordered_sum's
// order: values below the last multiple of 16 of the whole vector go to lane (index % 16), the
// rest are added one by one, in order, after the lanes are summed (`tail`).
inline void add_squares(const float* chunk, std::uint64_t c, std::uint64_t count, std::uint64_t lanes_end,
                        typename Traits::V* lanes, float* tail, std::uint64_t& tail_count) {
  using V = typename Traits::V;
  constexpr std::uint64_t W = Traits::kWidth;
  constexpr std::uint64_t kVectors = kNormLanes / W;
  std::uint64_t k = 0;
  for (; k + kNormLanes <= count && c + k + kNormLanes <= lanes_end; k += kNormLanes) {
    for (std::uint64_t v = 0; v < kVectors; ++v) {
      const V x = Traits::load_f32(reinterpret_cast<const std::byte*>(chunk + k + v * W));
      lanes[v] = lanes[v] + x * x;
    }
  }
  for (; k < count; ++k) tail[tail_count++] = chunk[k] * chunk[k];
}

// chunk[0, count) / divisor (when not 1) as values [c, c + count) of an output row. `stream`: the
// whole vectors' stores bypass the cache (out + c is then vector-aligned: streams_bags).
template <OutputDType OD>
inline void store_chunk(const float* chunk, std::uint64_t count, float divisor, std::byte* out, std::uint64_t c,
                        bool stream = false) {
  using V = typename Traits::V;
  constexpr std::uint64_t W = Traits::kWidth;
  const std::uint64_t whole = count / W * W;
  const V d(divisor);
  for (std::uint64_t k = 0; k < whole; k += W) {
    V x = Traits::load_f32(reinterpret_cast<const std::byte*>(chunk + k));
    if (divisor != 1.0f) x = x / d;
    store<OD>(out, c + k, x, stream);
  }
  for (std::uint64_t k = whole; k < count; ++k) store_one<OD>(out, c + k, divisor != 1.0f ? chunk[k] / divisor : chunk[k]);
}

// chunk[0, count) as the output dtype holds them (16-bit outputs: rounded, read back as f32).
template <OutputDType OD>
inline void round_to_output(float* chunk, std::uint64_t count) {
  if constexpr (OD == OutputDType::kBF16) {
    for (std::uint64_t k = 0; k < count; ++k) chunk[k] = bf16_to_f32(f32_to_bf16(chunk[k]));
  } else if constexpr (OD == OutputDType::kF16) {
    for (std::uint64_t k = 0; k < count; ++k) chunk[k] = f16_to_f32(f32_to_f16(chunk[k]));
  }
}

// The first id of bag b (the ids of consecutive bags are consecutive).
inline std::uint64_t first_id_of(const PoolArgs& a, std::uint64_t b) noexcept {
  return a.offsets ? a.offsets[b] : b * a.length;
}

// Bags [begin, end) of a plain request into an f32 output, normalized or not, rows of exactly
// kVectors vectors: one loop over the bags around pool_block, so what a bag costs beyond its rows
// is zeroing and storing its accumulators, as in FBGEMM's loop. Going through the chunk loop and
// the dispatch on the vector count for every bag cost dim-64 bags of 8 ids 7-8% (f16, int8) and
// bags of 2 7-16% of their time (see the commit).
// Flattened: with pool_block instantiated for the chunk path too, GCC called it out of line here,
// a call per bag and the Bag in memory (f32 256 bags of 8 0.77x).
template <std::uint64_t kVectors, DType TD, IdPath P>
__attribute__((flatten)) void pool_bags_in_registers(const PoolArgs& a, std::uint64_t begin, std::uint64_t end,
                                                     const RowPrefetch& ahead, bool stream) {
  constexpr bool kInterleaved = interleaves_prefetch<TD>(kVectors * Traits::kWidth);
  float* out = static_cast<float*>(a.out);
  const bool normalize = a.normalize;
  for (std::uint64_t b = begin; b < end; ++b) {
    const Bag<TD, P> bag{a, first_id_of(a, b), first_id_of(a, b + 1), ahead};
    pool_block<kVectors, TD, P, kInterleaved>(bag, 0, out + b * a.dim, true, whole_bag(bag), stream, normalize);
  }
  if (stream) Traits::fence();
}

template <DType TD, IdPath P, std::size_t... kMinusOne>
void pool_bags_in_registers_of(const PoolArgs& a, std::uint64_t begin, std::uint64_t end, const RowPrefetch& ahead,
                               bool stream, std::uint64_t vectors, std::index_sequence<kMinusOne...>) {
  (void)((vectors == kMinusOne + 1
              ? (pool_bags_in_registers<kMinusOne + 1, TD, P>(a, begin, end, ahead, stream), true)
              : false) ||
         ...);
}

// Whether a call's pooled vectors leave by streaming stores (PoolArgs::nontemporal), which need
// every output row to start vector-aligned: the output does, and a row is a whole number of
// vector stores. Otherwise they are stored through the cache.
template <OutputDType OD>
inline bool streams_bags(const PoolArgs& a) noexcept {
  constexpr std::uint64_t kVectorBytes = Traits::kWidth * out_size(OD);
  return a.nontemporal && Traits::kCanStream && reinterpret_cast<std::uintptr_t>(a.out) % kVectorBytes == 0 &&
         a.dim * out_size(OD) % kVectorBytes == 0;
}

// The bags [begin, end) that pool_bags_on does not pool in registers, a chunk of each vector at a
// time. kInPlace: an f32 output row, not streamed, holds its chunks' sums as they are made;
// otherwise they are made in `chunk` in L1 (a 16-bit output's rounded from there) and stored from
// there, streamed where streams_bags says so. (Pooling every row of an f32 output into `chunk` and
// copying it out cost bags of 8 ids up to a sixth of their time: GCC made the copy a `rep movsq`,
// which held back the next bag's loads. kInPlace is a template argument because decided at run time, GCC's
// code pooled AVX-512 f16 768 bags of 8 0.97-0.98x as fast.)
template <DType TD, OutputDType OD, IdPath P, bool kInPlace>
void pool_bags_in_chunks(const PoolArgs& a, std::uint64_t begin, std::uint64_t end, const RowPrefetch& ahead) {
  using V = typename Traits::V;
  const bool stream = !kInPlace && streams_bags<OD>(a);
  constexpr std::uint64_t W = Traits::kWidth;
  const std::uint64_t dim = a.dim;
  alignas(64) float chunk[kChunkFloats];
  RowStage stage;
  // (pool_block and block passes read the table)
  RowStage* const staging = stages_rows<TD>(a.row_bytes) && !ahead.block_passes ? &stage : nullptr;
  for (std::uint64_t b = begin; b < end; ++b) {
    const Bag<TD, P> bag{a, first_id_of(a, b), first_id_of(a, b + 1), ahead, staging};
    std::byte* out = static_cast<std::byte*>(a.out) + b * dim * out_size(OD);
    // The squares, when normalizing: 16 lanes, and the values past the last multiple of 16 (< 16).
    V lanes[kNormLanes / W];
    for (V& l : lanes) l = V(0.0f);
    float tail[kNormLanes];
    std::uint64_t tail_count = 0;
    const std::uint64_t lanes_end = dim - dim % kNormLanes;
    for (std::uint64_t c = 0; c < dim; c += kChunkFloats) {
      const std::uint64_t count = dim - c < kChunkFloats ? dim - c : kChunkFloats;
      float* pooled = kInPlace ? reinterpret_cast<float*>(out) + c : chunk;
      pool_chunk(bag, c, count, pooled, c == 0);
      if (a.normalize) {
        round_to_output<OD>(pooled, count);
        add_squares(pooled, c, count, lanes_end, lanes, tail, tail_count);
      }
      if (!kInPlace && !a.normalize) store_chunk<OD>(chunk, count, 1.0f, out, c, stream);
    }
    if (!a.normalize) continue;
    alignas(64) float lane_values[kNormLanes];
    for (std::uint64_t v = 0; v < kNormLanes / W; ++v) {
      Traits::store_f32(reinterpret_cast<std::byte*>(lane_values + v * W), lanes[v], false);
    }
    float squares = 0.0f;
    for (float l : lane_values) squares += l;
    for (std::uint64_t k = 0; k < tail_count; ++k) squares += tail[k];
    // A zero vector (an empty bag) stays zero.
    const float length = squares > 0.0f ? __builtin_sqrtf(squares) : 1.0f;
    if constexpr (kInPlace) {  // the output row holds the vector: divided where it is
      store_chunk<OD>(reinterpret_cast<const float*>(out), dim, length, out, 0);
      continue;
    }
    if (dim <= kChunkFloats) {  // `chunk` holds the vector as the output would
      store_chunk<OD>(chunk, dim, length, out, 0, stream);
      continue;
    }
    for (std::uint64_t c = 0; c < dim; c += kChunkFloats) {
      const std::uint64_t count = dim - c < kChunkFloats ? dim - c : kChunkFloats;
      pool_chunk(bag, c, count, chunk, false);
      round_to_output<OD>(chunk, count);
      store_chunk<OD>(chunk, count, length, out, c, stream);
    }
  }
  if (stream) Traits::fence();
}

template <DType TD, OutputDType OD, IdPath P>
void pool_bags_on(const PoolArgs& a, std::uint64_t begin, std::uint64_t end) {
  constexpr std::uint64_t W = Traits::kWidth;
  const std::uint64_t dim = a.dim;
  const std::uint64_t table_row_bytes = a.row_bytes;  // computed by the caller, as the gather's
  // Decided once for the call: such rows are one chunk of more vectors than the registers pool
  // (kRegisterVectors, or kMemoryBlockPassVectors for memory_block_passes' rows).
  const bool memory_blocks = memory_block_passes<TD>(a, dim / W);
  const std::uint64_t register_vectors = memory_blocks ? kMemoryBlockPassVectors : kRegisterVectors<TD>;
  const bool block_passes = takes_block_passes<TD>(dim, table_row_bytes) && dim / W > register_vectors;
  // A plain request into an f32 output, normalized or not, of rows of whole vectors that fit in the
  // registers, goes to pool_bags_in_registers.
  constexpr bool kPoolInPlace = OD == OutputDType::kF32;
  const bool in_registers = kPoolInPlace && P != IdPath::kGeneral && dim % W == 0 && dim / W <= register_vectors;
  // (in_registers rows are such rows: pool_bags_in_registers asks the same at compile time)
  const bool interleaved = dim / W <= register_vectors && interleaves_prefetch<TD>(dim / W * W);
  const std::uint64_t block_vectors = block_passes ? block_pass_vectors<TD, P>(dim / W, memory_blocks) : 0;
  const std::uint64_t call_bags = a.bags > end ? a.bags : end;
  const std::uint64_t call_ids = first_id_of(a, call_bags);
  const std::uint64_t block_distance = block_pass_distance<TD>(
      memory_blocks ? memory_block_distance(call_ids, call_bags) : kBlockPassDistance, table_row_bytes, a.min_rows_ahead);
  const PrefetchPlan plan = interleaved    ? interleaved_plan(table_row_bytes, a.min_rows_ahead)
                            : block_passes ? block_pass_plan<TD>(table_row_bytes, block_vectors, block_distance)
                                           : bag_prefetch_plan<TD>(table_row_bytes);
  const RowPrefetch ahead{plan.distance, plan.bytes, first_id_of(a, end), call_ids,
                          block_passes, interleaved, block_vectors};
  // The first rows of the range, before the first pass reaches them (later rows are prefetched
  // `ahead.distance` ids ahead of it, past the range's end: PoolArgs::bags). Where the range follows
  // its thread's last, they are on their way already and these prefetches find them.
  const std::uint64_t range_first = first_id_of(a, begin);
  for (std::uint64_t i = range_first; i < ahead.ahead_end && i < range_first + ahead.distance; ++i) {
    prefetch_row<TD>(a.token + bag_row(a, i) * a.token_stride, ahead.bytes, table_row_bytes, a.params_offset);
  }
  const bool stream = streams_bags<OD>(a);
  if constexpr (kPoolInPlace && P != IdPath::kGeneral) {
    if (in_registers) {
      return pool_bags_in_registers_of<TD, P>(a, begin, end, ahead, stream, dim / W,
                                               std::make_index_sequence<kRegisterVectors<TD>>());
    }
  }
  if constexpr (kPoolInPlace) {
    if (!stream) return pool_bags_in_chunks<TD, OD, P, true>(a, begin, end, ahead);
  }
  pool_bags_in_chunks<TD, OD, P, false>(a, begin, end, ahead);
}

template <DType TD, OutputDType OD>
void pool_bags(const PoolArgs& a, std::uint64_t begin, std::uint64_t end) {
  switch (bag_path(a)) {
    case IdPath::kPlainNarrow: return pool_bags_on<TD, OD, IdPath::kPlainNarrow>(a, begin, end);
    case IdPath::kPlainWide: return pool_bags_on<TD, OD, IdPath::kPlainWide>(a, begin, end);
    case IdPath::kGeneral: return pool_bags_on<TD, OD, IdPath::kGeneral>(a, begin, end);
  }
}
