// The embedding kernel, written once and compiled once per ISA. Each per-ISA translation unit
// includes this file inside its own namespace, after defining `Traits`:
//   V                       the vector type (xsimd batch, or float for the scalar build)
//   kWidth                  floats per vector
//   load_f32/f16/bf16/i8    decode kWidth table elements to a V
//   store_f32/f16/bf16      encode a V into kWidth output elements (store_f32 can stream)
//   hsum, fence, prefetch
// Everything here is a template or has internal linkage, and it calls no inline function shared
// with baseline code (no std::min/max/sqrt/bit_cast: builtins or local helpers instead), so no
// symbol compiled with wider flags can be picked by the linker for a baseline caller
// (tests/check_kernel_symbols.py checks the objects, at -O0 too).
//
// Arithmetic order matches the reference path exactly (token * token_scale + segment + position, then scale,
// each a rounded f32 operation; int8 as q * scale + bias), so f32 results are bit-identical
// across ISAs and with the reference. Only the fused LayerNorm differs (f32 statistics here,
// double in the reference).

namespace {

inline float load_float(const std::byte* p) noexcept {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
inline std::uint16_t load_u16(const std::byte* p) noexcept {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline void store_u16(std::byte* p, std::uint16_t v) noexcept { std::memcpy(p, &v, 2); }

// Id i of an array of 64-bit (`kWide`) or 32-bit ids.
template <bool kWide>
inline std::uint64_t id_of_width(const void* ids, std::uint64_t i) noexcept {
  if constexpr (kWide) {
    return static_cast<std::uint64_t>(static_cast<const std::int64_t*>(ids)[i]);
  } else {
    return static_cast<std::uint64_t>(static_cast<const std::int32_t*>(ids)[i]);
  }
}

inline std::uint64_t id_at(RawIds ids, std::uint64_t i) noexcept {
  return ids.wide ? id_of_width<true>(ids.data, i) : id_of_width<false>(ids.data, i);
}

// The id token i stands for: its own, or 0 for an id outside the table when the output maps those
// to row 0 (ids arrive validated otherwise).
inline std::uint64_t effective_id(RawIds ids, std::uint64_t zero_outside, std::uint64_t i) noexcept {
  const std::uint64_t id = id_at(ids, i);
  return zero_outside != 0 && id >= zero_outside ? 0 : id;
}

// The token-table row of an id: itself, or its entry in the id map (validated by the Embedder).
inline std::uint64_t mapped_row(const std::byte* id_map, std::uint64_t id) noexcept {
  if (id_map == nullptr) return id;
  std::int32_t row;
  std::memcpy(&row, id_map + 4 * id, 4);
  return static_cast<std::uint64_t>(row);
}

// Forced inline: GCC kept this out of line, a call per token for the prefetch and one for the
// row; inlined, the dim-64 gather runs 1.18-1.24x faster (AVX2 1.08x, GPT-2 1.02-1.04x).
__attribute__((always_inline)) inline std::uint64_t token_row(const KernelArgs& a, std::uint64_t i) noexcept {
  return mapped_row(a.id_map, effective_id(a.ids, a.zero_outside_rows, i));
}

// How an id finds its table row, fixed for a call (the gather's and the bags'). On the plain paths
// an id is its row (no id map, no ids outside the table reading row 0) and the ids are all 32- or
// all 64-bit, so finding a row is a load and a multiply, with nothing read from the call's
// arguments: every store to the output may alias them (it is a std::byte*), so GCC reloads what
// the loop reads of them after each row.
enum class IdPath { kGeneral, kPlainNarrow, kPlainWide };

inline IdPath plain_id_path(RawIds ids) noexcept { return ids.wide ? IdPath::kPlainWide : IdPath::kPlainNarrow; }

// The table row of token i, for the gather.
template <IdPath P>
struct TokenRows {
  const KernelArgs& a;
  const std::byte* token = a.token;
  std::uint64_t stride = a.token_stride;
  const void* ids = a.ids.data;

  __attribute__((always_inline)) const std::byte* operator()(std::uint64_t i) const noexcept {
    if constexpr (P == IdPath::kGeneral) {
      return token + token_row(a, i) * stride;
    } else {
      return token + id_of_width<P == IdPath::kPlainWide>(ids, i) * stride;
    }
  }
};

// Walks tokens [begin, end) in order and yields the position-table row of each.
// Padding-aware models (RoBERTa and kin) give a pad token row position_offset - 1 and count only
// the other tokens, so a cursor starting mid-sequence first counts the non-pads before it.
class PositionCursor {
 public:
  __attribute__((always_inline)) PositionCursor(const KernelArgs& a, std::uint64_t begin) : a_(a), i_(begin) {
    if (a.position == nullptr || a.position_ids.data != nullptr) return;
    std::uint64_t first = 0;  // the first token of the sequence holding `begin`
    if (a.offsets != nullptr) {
      // The last sequence whose first token is <= begin (binary search, no std:: helpers here).
      std::uint64_t lo = 0, hi = a.sequences;
      while (lo < hi) {
        const std::uint64_t mid = (lo + hi + 1) / 2;
        if (a.offsets[mid] <= begin) lo = mid; else hi = mid - 1;
      }
      seq_ = lo;
      seq_end_ = a.offsets[seq_ + 1];
      first = a.offsets[seq_];
    } else {
      seq_ = a.length ? begin / a.length : 0;
      first = seq_ * a.length;
    }
    t_ = begin - first;
    if (a.padding_id >= 0) {
      for (std::uint64_t k = first; k < begin; ++k) nonpad_ += is_pad(k) ? 0 : 1;
    }
  }

  // Row for token i_, then advances to i_ + 1.
  __attribute__((always_inline)) std::uint64_t next() noexcept {
    if (a_.position_ids.data != nullptr) return id_at(a_.position_ids, i_++) + a_.position_offset;
    if (a_.offsets != nullptr) {
      while (i_ >= seq_end_) {  // move to the sequence holding i_ (skipping empty ones)
        ++seq_;
        seq_end_ = a_.offsets[seq_ + 1];
        t_ = 0;
        nonpad_ = 0;
      }
    } else if (t_ == a_.length) {
      ++seq_;
      t_ = 0;
      nonpad_ = 0;
    }
    const std::uint64_t start = a_.starts != nullptr ? a_.starts[seq_] : a_.start;
    if (a_.padding_id >= 0) {
      const bool pad = is_pad(i_);
      ++i_;
      ++t_;
      return pad ? a_.position_offset - 1 : start + nonpad_++ + a_.position_offset;
    }
    ++i_;
    return start + t_++ + a_.position_offset;
  }

 private:
  bool is_pad(std::uint64_t k) const noexcept {
    return id_at(a_.ids, k) == static_cast<std::uint64_t>(a_.padding_id);
  }
  const KernelArgs& a_;
  std::uint64_t i_;
  std::uint64_t seq_ = 0, seq_end_ = 0, t_ = 0, nonpad_ = 0;
};

// The order a range's tokens are embedded in: a call's [begin, end) are steps, and step v embeds
// token token(). Normally step v is token v. Position-major (KernelArgs::position_major: uniform
// sequences that all add position rows start, start + 1, ...), step v is position v / S of
// sequence v % S, so the S tokens that add one position row follow each other and all but the
// first read it from L1; in token order a whole sequence passes between two reads of a row. The
// Embedder chooses the order (embeds_position_major, with the measurements).
class StepOrder {
 public:
  __attribute__((always_inline)) StepOrder(const KernelArgs& a, std::uint64_t step)
      : position_major_(a.position_major), sequences_(a.sequences), length_(a.length) {
    if (!position_major_) {
      token_ = step;
      return;
    }
    column_ = step / sequences_;
    sequence_ = step % sequences_;
    token_ = sequence_ * length_ + column_;
  }
  bool position_major() const noexcept { return position_major_; }
  std::uint64_t token() const noexcept { return token_; }
  // Position-major only: the token's place in its sequence.
  std::uint64_t column() const noexcept { return column_; }

  __attribute__((always_inline)) void next() noexcept {
    if (!position_major_) {
      ++token_;
    } else if (++sequence_ == sequences_) {
      sequence_ = 0;
      token_ = ++column_;
    } else {
      token_ += length_;
    }
  }

 private:
  bool position_major_;
  std::uint64_t sequences_, length_;
  std::uint64_t token_ = 0, column_ = 0, sequence_ = 0;
};

// Which part of an upcoming row is prefetched, and how many rows ahead, at the top of each row's loop:
// the bags' plans, and the gather's for LayerNorm rows into 16-bit outputs and rows copied that are
// wider than 8 KiB
// (the gather's other rows prefetch the row ahead line by line since: interleaved_plan below;
// what this comment says of the gather was measured before that). What limits a random-row
// gather is how many cache-line misses the core keeps in flight: a software prefetch takes a miss
// buffer until its line arrives, and when they are all taken the prefetch instruction itself
// stalls (perf: 40-60% of the kernel's samples on it with the old plan of ~96 lines in flight for
// every narrow row). Measured on a 32 MiB-L3 Zen 4 (embedrt bench, 1 thread, tables in and 4x
// past the LLC; distance:lines swept, medians of 5 interleaved rounds):
//  - Rows of at most 5 lines (dim 64 f32, 64-256 int8, 128 f16): the first line only, 12 rows
//    ahead. The adjacent-line prefetcher brings its pair, and the row's other lines are short
//    demand misses the reorder window overlaps across many rows. 1.2-1.35x over whole rows 24
//    ahead; whole rows 4 ahead were 0.93x. Except rows of 65 to 128 bytes (f32 dims 17-32, 16-bit
//    33-64, int8 57-120, int4 121-248, with their scale and bias), which take both lines: on the
//    Zen 3 below the pair did not come in time. (Quantized rows already had the line of their scale
//    and bias, the second one except where it straddles the two: int8 57-60. The bags keep quantized
//    rows of 72-128 bytes on their first line and their scale's, bag_prefetch_plan, unless they fit
//    the registers: those take the whole row, interleaves_prefetch.) Measured there
//    (bench/ab.py, 1 thread, 1.1-2.2M-row tables 3.6-5.2x the LLC in 2 MiB pages, 9 interleaved
//    rounds, against the first line): gather f16 64 -> f32 1.45x [1.09-1.59], bf16 64 + positions
//    2.0x [1.26-2.66], f32 32 1.23x [1.04-1.37]; bags of 8 f16 64 1.15x [1.08-1.19], of 32 1.02x
//    [0.93-1.16]; a control case the change did not touch, 1.06x [0.93-1.15]. Rows of 4 lines whole
//    lost (bags of f32 64: 0.89-0.99x, at 6, 12 or 20 rows ahead, prefetched at the top of each
//    row). Bags of rows that fit the registers (2-4 lines with AVX2, up to 16 with AVX-512) have
//    since taken the whole row ahead (interleaved_plan), a line after each of this row's lines is first loaded
//    (interleaves_prefetch in bag_body.inl: 1.07-1.24x on the Zen 3, up to 2.3x on a Zen 5).
//  - Wider rows: the whole row up to 16 lines, else its first 8 lines (the L2's streamer follows
//    the rest once the first loads train it; 48 prefetches per GPT-2 f32 row, 256 per Llama-3 f32
//    row, filled the miss buffers), about 6 KiB of rows and at most 2 rows ahead: GPT-2 int8 (13
//    lines) 1.06-1.51x and int4 (7 lines) 1.43x over the old 7 and 13 rows ahead; GPT-2 f32
//    unchanged (it was 2 rows).
//  - Bags (kBagReach) let the rows of 6 KiB ahead be up to 8: pooling stores nothing per row, so
//    fewer instructions separate the rows and more of them fit in the core's window; and they take
//    rows of up to 24 lines whole. Float rows of 6-48 lines have since gone to bag_prefetch_plan's
//    heads (bag_body.inl), so this reach serves quantized rows of more than 5 lines and float rows
//    of more than 48. When it was measured (480 MiB-LLC AVX-512): 512-byte f16 rows pooled 1.15x
//    faster 8 rows ahead than 2; rows of 1-3 KiB were within 3% from 2 to 8 rows ahead; f16 768
//    whole, 4 rows ahead, 1.01-1.07x over its first 8 lines; f32 768 0.83x whole.
// Tried and not kept (bench/ab.py, 1 thread, tables 4.3x a 480 MiB LLC, Sapphire Rapids-class
// AVX-512 BF16, 3-5 interleaved rounds, median [IQR] against this plan):
//  - The gather also prefetching the next row whole, a line per vector of this one as it is
//    computed: f32 768 + positions 0.95x [0.94-0.98], bf16 768 -> bf16 1.05x [1.01-1.18], int8
//    1.02x [0.96-1.38], Gemma-3 bf16 1.02x [0.92-1.26]: nothing clear, for a second loop per path.
//    (On the Zen 5 it won by far, the row ahead 8 KiB of rows ahead: the gather does it since,
//    interleaved_plan below; not measured again on that machine.)
//  - Bags prefetching the row ahead that way instead of whole (as FBGEMM's JIT kernels do), at
//    this plan's distance or 16 rows: f16 768 0.61-0.80x, f32 768 0.64-0.85x, f16 256 0.81-0.89x.
//    (Rows that fit the registers do it since, measured on a Zen 3 and a Zen 5: interleaves_prefetch;
//    so do AVX-512's f16 256 rows, 1.73x on the Zen 5; not measured again on the 480 MiB machine.)
// On a 32 MiB-L3 Zen 3 (AVX2; 1 thread, GPT-2 f32 + positions over a table 4.6x the LLC, 7
// interleaved rounds), the plan's distance and reach swept from 2 to 8 rows and from 2 lines to
// the whole row all ran within 0.91-1.00x of this plan (1.13-1.23 M tokens/s): there the limit is
// what one core reads from random rows (embedrt_random_rows_probe: 3 KiB rows at 49% of the
// in-order rate in 4 KiB pages, 62% in 2 MiB pages), not the prefetches.
struct PrefetchPlan {
  std::uint64_t distance;  // rows ahead
  std::uint64_t bytes;     // from the row's start
};

// How far ahead wide rows are prefetched: about `bytes` of rows, from 1 to `max_rows` rows; rows
// of at most `whole_row_bytes` whole, wider ones by their first 8 lines.
struct WideRowReach {
  std::uint64_t bytes, max_rows, whole_row_bytes;
};
constexpr WideRowReach kGatherReach{2 * 3072, 2, 16 * 64};  // two f32 rows of dim 768; one Llama-3 row
constexpr WideRowReach kBagReach{2 * 3072, 8, 24 * 64};

constexpr std::uint64_t kNarrowRowBytes = 5 * 64;
constexpr std::uint64_t kNarrowDistance = 12;
constexpr std::uint64_t kPairRowBytes = 2 * 64;  // rows of 65 to 128 bytes: both lines prefetched
constexpr std::uint64_t kRowHeadBytes = 8 * 64;

inline PrefetchPlan prefetch_plan(std::uint64_t table_row_bytes, WideRowReach reach) {
  if (table_row_bytes <= kNarrowRowBytes) {
    return {kNarrowDistance, table_row_bytes > 64 && table_row_bytes <= kPairRowBytes ? kPairRowBytes : 64};
  }
  const std::uint64_t rows = reach.bytes / table_row_bytes;
  return {rows < 1 ? 1 : rows > reach.max_rows ? reach.max_rows : rows,
          table_row_bytes <= reach.whole_row_bytes ? table_row_bytes : kRowHeadBytes};
}

// The gather's plan: rows of more than 5 lines that move at most 1 KiB per token, read and written
// (f32 -> f32 and 16-bit copies of dim 128 to 256, before they interleaved; LayerNorm rows into a
// 16-bit output that move at most 1 KiB since), take their first 2 lines 6 rows ahead. Their
// tokens are quick, so 2 whole rows ahead arrive late (perf: 72% of the samples on the row's first
// load), and 6 whole rows ahead fill the miss buffers; the L2's streamer brings the rest of each
// row once its first 2 lines are read. Measured (embedrt bench, 1 thread, 4x the LLC, medians of
// 3-5 interleaved rounds) against whole rows 2 ahead: f32 dim 128 1.18-1.22x, bf16 -> bf16 dim
// 256 1.18x; but bf16 dim 256 -> f32 0.75x and int8 dim 504 -> f32 0.66x (their larger output
// rows give the whole rows time to arrive), f32 dim 256 1.01x, dim 384 0.94x, dim 768 0.96x.
constexpr std::uint64_t kQuickTokenBytes = 1024;
constexpr PrefetchPlan kQuickTokenPlan{6, 2 * 64};

inline PrefetchPlan gather_prefetch_plan(std::uint64_t table_row_bytes, std::uint64_t out_row_bytes) {
  if (table_row_bytes > kNarrowRowBytes && table_row_bytes + out_row_bytes <= kQuickTokenBytes) return kQuickTokenPlan;
  return prefetch_plan(table_row_bytes, kGatherReach);
}

// The gather's other rows are prefetched whole, each line of the row ahead as the first load from
// the same line of the row being embedded is issued (prefetch_line_ahead), about 8 KiB of rows
// ahead and at least 4 rows: 128 rows of one line, 32 of 256 bytes, 16 of 512, 8 of 1 KiB, 4 of
// 2 KiB or more (interleaved_plan). So are rows computed (converted,
// added to, scaled), rows copied as they are of up to 8 KiB, quantized rows staged in L1 (as
// RowStage::fill copies them) and LayerNorm rows into an f32 output (as their first pass stores the
// sum in the output row); not LayerNorm rows into a 16-bit output (their first pass is the
// statistics' sum, whose order is fixed), nor copies of wider rows (gather_prefetch_plan).
// The bags do the same with rows that fit the registers (interleaves_prefetch, bag_body.inl), as
// FBGEMM's kernels do. Near the end of the call the gather has no row ahead (a null pointer, tested
// with each load; the bags take the call's last row instead; a range prefetches past its own end:
// KernelArgs::steps). Measured on a 32 MiB-L3 Zen 5 (AVX-512 BF16; bench/ab.py, 1 thread, cpu clock, one
// output buffer, tables 3.9x the LLC unless named, 5 interleaved rounds, against the plans above):
//  - Copied: f32 16 1.11x, 64 1.65x, 128 1.60x, 256 1.24x, 384 1.36x, 768 1.21x; f16 256 1.50x;
//    bf16 4096 1.17x; f32 64 with outputs rotating through DRAM 1.41x.
//  - Computed: GPT-2 shape (50257x768 + positions) f32 1.26x, bf16 -> f32 1.87x, f16 -> f32 1.78x,
//    bf16 -> bf16 3.03x, f32 -> bf16 1.49x; f32 64 + positions 2.05x, f32 16 + positions 1.17x,
//    f16 64 -> f32 1.17x; Gemma-3 bf16 5376 times its scale 1.13x.
//  - Staged: GPT-2 int8 1.14x, int4 1.13x; int8 64 1.49x, int8 256 1.85x.
//  - LayerNorm into f32 (a later change, against this plan for the others): BERT-base (+ positions,
//    segments) 1.10-1.14x, f32 128 3.55x, bf16 768 + positions 1.78x, int8 768 1.05x [0.95-1.10];
//    AVX2 BERT 1.15x, f32 128 3.75x; 2 threads BERT 1.13x, f32 128 3.45x; f32 768 -> bf16 (not
//    interleaved) 1.00x.
//  - AVX2 (forced, same machine): f32 64 1.39x, GPT-2 bf16 -> bf16 2.52x, int8 1.22x, int8 256
//    1.77x; SSE4.2 f32 64 1.48x.
//  - 2 threads (wall clock): f32 64 1.55x, 256 1.30x, 768 1.14x; GPT-2 f32 1.23x, bf16 -> bf16
//    3.02x, int8 1.13x; Gemma-3 bf16 times its scale 1.21x.
//  - Controls: BERT + LayerNorm 0.99x; warm single tokens 1.01-1.02x; f32 4096 copies 0.98x (1
//    thread), 1.00x (2). Copies of rows of 10-16 KiB (bf16 5376, f32 4096) interleaved had run
//    0.96-1.03x with 1 thread but 0.89-0.90x with 2: they keep the plan.
//  - The distance: 16 rows against 8 for copies of 256 bytes 1.24x, 512 bytes 1.03x, 1 KiB 0.95x;
//    8 rows against 16 for 2-4 KiB 1.05-1.09x, 4 against 8 for 2 KiB 1.04x, 3-4 KiB 1.00-1.02x,
//    8 KiB 1.05x. First capped at 16 rows (the bags' distance then); the cap lifted (a later
//    change, against 16 rows): copies f32 16 1.93x, f32 32 1.99x, f32 64 1.12x; f32 16 + positions
//    1.46x, f32 64 + positions 1.16x, f16 64 -> f32 1.45x; staged int8 64 1.28x; f32 128 (16 rows
//    either way) 1.00x; 2 threads f32 16 2.00x, f32 64 1.04x; AVX2 f32 16 2.25x, f32 64 1.24x, int8
//    64 1.23x. 24 and 32 rows of 256 bytes against 16: 1.11x, 1.13x; 48 and 64 rows of 128 bytes
//    against 32: 1.18x, 1.27x; 128 rows of one line against 64: copies 1.17x, + positions 0.97x.
//  - The row ahead prefetched whole at the top of each row's loop instead: as fast for copies of
//    up to 512 bytes, but 0.89x for GPT-2 f32 + positions, 0.80x for bf16 -> bf16, and f32 768
//    copies 0.82x as fast as the plans above. Not staging int8/int4 rows of 6-16 lines from memory
//    (the interleaved loop reading the table): AVX-512 0.98-1.12x, AVX2 0.61-0.86x, so they stay
//    (since, AVX-512 int8 rows with prefetches into L1 do not: stages_rows).
// Not measured on the Zen 3 or the 480 MiB-LLC Intel machine, where the plans above were tuned.
// Later, on that Intel machine: rows of up to 1 KiB at least 32 rows ahead (KernelArgs::
// min_rows_ahead) pooled f32 256 bags 1.24-1.29x, f32 128 1.65x, and gathered f32 256 1.06x, f32
// 128 1.09x; rows of 128 bytes further than their 64 lost 0.95-0.98x. The Zen 5 had gone the
// other way, so the prefetch calibration chooses (prefetch_calibration.cpp).
// `bytes` rounded up to whole cache lines.
constexpr std::uint64_t whole_lines(std::uint64_t bytes) { return (bytes + 63) / 64 * 64; }

// `distance` rows ahead, or `min_rows` (KernelArgs::min_rows_ahead) for rows of at most kFarRowBytes
// when that is further.
constexpr std::uint64_t floored_rows_ahead(std::uint64_t distance, std::uint64_t row_bytes, std::uint64_t min_rows) {
  return whole_lines(row_bytes) <= kFarRowBytes && min_rows > distance ? min_rows : distance;
}

constexpr std::uint64_t kInterleavedBytesAhead = 8192;
constexpr std::uint64_t kInterleavedMinRows = 4;
constexpr std::uint64_t kInterleavedCopyRowBytes = 8192;  // wider copies keep gather_prefetch_plan

// The plan of rows prefetched line by line (the gather's, and the bags' rows that fit the
// registers): whole rows, kInterleavedBytesAhead of them ahead; the distance, and the range's first
// rows.
// `min_rows`: KernelArgs::min_rows_ahead, which rows of at most kFarRowBytes take as a floor.
inline PrefetchPlan interleaved_plan(std::uint64_t table_row_bytes, std::uint64_t min_rows) {
  const std::uint64_t line_bytes = whole_lines(table_row_bytes);
  const std::uint64_t rows = kInterleavedBytesAhead / line_bytes;
  return {floored_rows_ahead(rows < kInterleavedMinRows ? kInterleavedMinRows : rows, line_bytes, min_rows), line_bytes};
}

// Called with the table offset of each load of kLoadBytes (at most a line) from a row, in order: the
// same line of the row `ahead` starts arriving when this load is the first to start in its line (a
// test the compiler drops when each load is a whole line). The lines no load starts in, before the
// row's first load or after its last, are the caller's. (A running "next line" cursor instead cost
// the copies 8-10%: it is a dependency from one load to the next.)
template <std::uint64_t kLoadBytes>
__attribute__((always_inline)) inline void prefetch_line_ahead(const std::byte* ahead, std::uint64_t offset) {
  if (offset % 64 < kLoadBytes) Traits::prefetch(ahead + offset);
}

// Traits that dequantize 4-bit codes by lookup (AVX-512) say so by having dequantize_u4.
template <typename T>
concept DequantizesNibbles = requires(const std::byte* p) { T::dequantize_u4(p, false, 1.0f, 0.0f); };

// kWidth int4 codes from element j (`odd`: j is odd, the first code is a high nibble), dequantized.
template <typename T = Traits>
inline typename T::V load_int4_vector(const std::byte* row, std::uint64_t j, bool odd, float q_scale, float q_bias) {
  if constexpr (DequantizesNibbles<T>) {
    return T::dequantize_u4(row + j / 2, odd, q_scale, q_bias);
  } else {
    return T::load_u4(row + j / 2, odd) * typename T::V(q_scale) + typename T::V(q_bias);
  }
}

template <DType TD>
inline typename Traits::V load(const std::byte* row, std::uint64_t j, float q_scale, float q_bias) {
  if constexpr (TD == DType::kF32) return Traits::load_f32(row + 4 * j);
  if constexpr (TD == DType::kF16) return Traits::load_f16(row + 2 * j);
  if constexpr (TD == DType::kBF16) return Traits::load_bf16(row + 2 * j);
  if constexpr (TD == DType::kInt8Rowwise) {
    return Traits::load_i8(row + j) * typename Traits::V(q_scale) + typename Traits::V(q_bias);
  }
  if constexpr (TD == DType::kInt4Rowwise) {
    if constexpr (Traits::kWidth == 1) {  // one element: either nibble of byte j / 2
      const auto byte = static_cast<unsigned>(row[j / 2]);
      return static_cast<float>(j % 2 ? byte >> 4 : byte & 0xfu) * q_scale + q_bias;
    } else {  // kWidth elements from j: from the high nibble of byte j / 2 when j is odd (a peeled row)
      return load_int4_vector(row, j, j % 2 != 0, q_scale, q_bias);
    }
  }
}

// load() where j's parity is known: a vector loop stepping by kWidth (even) from `head` keeps
// head's parity, so an int4 row's nibble alignment is decided once per row rather than per vector.
template <DType TD, bool kOddJ>
inline typename Traits::V load_with_parity(const std::byte* row, std::uint64_t j, float q_scale, float q_bias) {
  if constexpr (TD == DType::kInt4Rowwise && Traits::kWidth != 1) {
    return load_int4_vector(row, j, kOddJ, q_scale, q_bias);
  } else {
    return load<TD>(row, j, q_scale, q_bias);
  }
}

template <DType TD>
inline float load_one(const std::byte* row, std::uint64_t j, float q_scale, float q_bias) {
  if constexpr (TD == DType::kF32) return load_float(row + 4 * j);
  if constexpr (TD == DType::kF16) return f16_to_f32(load_u16(row + 2 * j));
  if constexpr (TD == DType::kBF16) return bf16_to_f32(load_u16(row + 2 * j));
  if constexpr (TD == DType::kInt8Rowwise) {
    return static_cast<float>(static_cast<std::int8_t>(row[j])) * q_scale + q_bias;
  }
  if constexpr (TD == DType::kInt4Rowwise) {
    const auto byte = static_cast<unsigned>(row[j / 2]);
    return static_cast<float>(j % 2 ? byte >> 4 : byte & 0xfu) * q_scale + q_bias;
  }
}

template <OutputDType OD>
inline void store(std::byte* out, std::uint64_t j, typename Traits::V v, bool stream) {
  if constexpr (OD == OutputDType::kF32) Traits::store_f32(out + 4 * j, v, stream);
  if constexpr (OD == OutputDType::kF16) Traits::store_f16(out + 2 * j, v, stream);
  if constexpr (OD == OutputDType::kBF16) Traits::store_bf16(out + 2 * j, v, stream);
}

template <OutputDType OD>
inline void store_one(std::byte* out, std::uint64_t j, float v) {
  if constexpr (OD == OutputDType::kF32) std::memcpy(out + 4 * j, &v, 4);
  if constexpr (OD == OutputDType::kF16) store_u16(out + 2 * j, f32_to_f16(v));
  if constexpr (OD == OutputDType::kBF16) store_u16(out + 2 * j, f32_to_bf16(v));
}

// int8 and int4 rows carry their scale and bias after the codes (f32 and f16). int4's are made f32
// by Traits::f16_one, the F16C instruction where the ISA has one: f16_to_f32 is about 15
// instructions and 3 branches a value, for two values every row. Both are exact; a NaN differs only
// in its quiet bit, which the first arithmetic on it sets anyway.
template <DType TD>
inline void row_quantization(const std::byte* row, std::uint64_t params_offset, float& scale, float& bias) {
  if constexpr (TD == DType::kInt8Rowwise) {
    scale = load_float(row + params_offset);
    bias = load_float(row + params_offset + 4);
  } else if constexpr (TD == DType::kInt4Rowwise) {
    scale = Traits::f16_one(load_u16(row + params_offset));
    bias = Traits::f16_one(load_u16(row + params_offset + 2));
  } else {
    scale = 1.0f;
    bias = 0.0f;
  }
}

constexpr std::uint64_t out_size(OutputDType od) { return od == OutputDType::kF32 ? 4 : 2; }

// The bytes holding a table row's first n elements (int4: two a byte), without a quantized row's
// scale and bias: layout.hpp's, known at compile time for the prefetch loops.
template <DType TD>
constexpr std::uint64_t table_bytes(std::uint64_t n) {
  return detail::row::value_bytes(TD, n);
}

// Tables whose rows carry their own scale and bias (after the codes, at params_offset).
template <DType TD>
constexpr bool kRowwiseQuantized = TD == DType::kInt8Rowwise || TD == DType::kInt4Rowwise;

// Starts the arrival of a table row's first `bytes` (a prefetch plan's), and of a quantized row's
// scale and bias, read before its codes, when they sit at its end past those bytes. The gather and
// the bags both prefetch through it.
template <DType TD>
__attribute__((always_inline)) inline void prefetch_row(const std::byte* row, std::uint64_t bytes,
                                                        std::uint64_t table_row_bytes, std::uint64_t params_offset) {
  for (std::uint64_t k = 0; k < bytes; k += 64) Traits::prefetch(row + k);
  if constexpr (kRowwiseQuantized<TD>) {
    if (bytes < table_row_bytes) Traits::prefetch(row + params_offset);
  }
}

// Quantized rows of at most 5 lines (int8 dims up to 312, int4 up to 632) are copied into L1,
// kStagedRows consecutive ids at a time, and used from there: by the gather, and by the bags where
// pool_rows pools them (AVX-512, int4 rows of more than kRegisterVectors vectors: dims 272-632;
// across bag boundaries; AVX2 and SSE4.2 pool such bags in block passes instead, and AVX-512 int8
// rows too, see bag_body.inl; this paragraph's AVX-512 bags were measured before that). Used
// straight from a table 4x the LLC, int8 dim-256 rows were pooled at 9-10 M rows/s (1 thread),
// where a loop that only reads the same rows' lines reaches 21-22 M and pooling from L2 75 M:
// dequantizing (5 operations per vector on AVX-512's 2 vector ports) keeps few rows in the core's
// window, so few of their lines are in flight; the copy loop keeps many. Measured (bench/ab.py,
// 1 thread, tables 4.3x the 480 MiB LLC, staged / from the table):
//  - Bags (5 rounds): int8 256 bags of 8 1.23x [1.20-1.23], of 32 1.27x, of 128 1.28x; int4 512
//    bags of 32 1.33x; int8 256 cached 1.01x, AVX2 1.02x. Staging each bag's rows on their own
//    gave bags of 8 4% less; copying with memcpy (a call per row) instead of whole lines, 17% less.
//  - Gather (3 rounds): into one output buffer int8 256 1.77x, int8 128 1.16x, int4 512 1.61x,
//    AVX2 int8 256 2.57x; int8 64 with outputs rotating through DRAM 1.39x, int8 256 + positions
//    1.05x; cached int8 64 1.20x, int8 256 1.05x; single int8 256 tokens 1.06x; f32 64 (not
//    staged) 1.01x.
// Not staged: f16 and bf16 rows of 6-16 lines (bags: f16 256 1.13x and 384 1.24x in one run,
// 0.97x and 1.04x in the next, and cached f16 256 0.72x), of 2-4 lines (f16 64 0.78x, 128 0.87x),
// f32 rows (64 0.72x, 256 0.93x).
// The gather also stages quantized rows of 6-16 lines (int8 dims 313-1016, int4 633-2040) when they
// come from memory (KernelArgs::token_rows_from_memory): int8 rows of 13 lines from a table 4x the
// LLC 1.38x, but from GPT-2's, in the LLC, 0.97x (the 480 MiB-LLC Xeon, prefetching into L1: the
// L2 kernel set came later). See the commit for the measures of the rule.
// Bags do not: staging such rows from a table 4x the LLC pooled int8 768 bags of 8, 32 and 128 at
// 0.92x, 0.88x and 0.92x, int4 768 bags of 32 at 1.04x, int4 1536 at 0.97x (5 rounds). From the
// table, pool_rows reads such rows 8 side by side; from the stage, 4 (why that loses is not known).
// Nor do the AVX-512 kernels that prefetch into L1 for int8 rows of 6-16 lines, the set the
// prefetch calibration picks on a host whose random reads into L1 are fast. On such a Zen 5 the
// copy cost more than it won: from the table, against staged (bench/ab.py, 1 thread, cpu clock,
// tables 3.1-3.5x the LLC, 5-7 rounds): int8 768 with outputs rotating 1.21x, one buffer +
// positions 1.25x, GPT-2's + positions 1.15x, into bf16 1.18x, calls of 1024 tokens 1.14-1.21x,
// int8 384 1.23x, int8 1000 1.15x; 2 threads (wall clock) GPT-2's 1.07x, int8 768 1.13x (and an
// earlier Zen 5, AVX-512: 0.98-1.12x, see "Not staging" above). Kept elsewhere:
//  - the L2 set (kPrefetchesIntoL2), which hosts with slow reads into L1 run, as the Xeons: on the
//    480 MiB-LLC Xeon (the set `auto` takes there; tables 3.6x the LLC, rows touched 2.4x, 5
//    rounds) the table's rows ran 0.67x [0.63-0.69] into one buffer + positions and 0.80x
//    [0.80-0.83] with outputs rotating (on this Zen 5, forced, they ran 1.17x);
//  - AVX2 and SSE4.2: AVX2 from the table ran 0.61-0.86x on the earlier Zen 5, here 0.95-0.98x
//    with outputs rotating (1.18x into one buffer);
//  - int4 rows of 6-16 lines: int4 768 0.87x and 1.12x in two runs, 1536 1.04x;
//  - narrow rows: from the table, int8 256 into one buffer 0.93x, int4 256 0.81x. Into outputs
//    rotating past the LLC, whose regular stores each wait for their line, the table's rows did
//    better (int8 64-256 1.29-1.92x, int4 64-512 1.11-1.65x), but with streaming stores the two
//    tie (int4 256 33.5 and 34.8 M tokens/s): the stores' cost, not the stage's.
constexpr std::uint64_t kStagedRows = 16;
constexpr std::uint64_t kStagedRowBytes = 16 * 64;  // the widest staged row

// Whether this copy of the kernels is prefetch_l2_kernels.inl's second set, whose prefetches
// stop at L2.
template <typename T>
constexpr bool kPrefetchesIntoL2 = requires { requires T::kIntoL2; };

template <DType TD>
constexpr bool stages_rows(std::uint64_t table_row_bytes, bool rows_from_memory = false) {
  const bool wide_rows_staged = TD == DType::kInt4Rowwise || Traits::kWidth != 16 || kPrefetchesIntoL2<Traits>;
  return kRowwiseQuantized<TD> &&
         (table_row_bytes <= kNarrowRowBytes ||
          (wide_rows_staged && rows_from_memory && table_row_bytes <= kStagedRowBytes));
}

// After a row's vector loads (prefetch_line_ahead), what the row ahead has left to start: the line
// of its values from `tail` (when tail < dim: no vector load started there) and a quantized row's
// scale and bias. Nothing without a row ahead.
template <DType TD>
__attribute__((always_inline)) inline void prefetch_rest_ahead(const std::byte* ahead, std::uint64_t tail,
                                                               std::uint64_t dim, std::uint64_t params_offset) {
  if (ahead == nullptr) return;
  if (tail < dim) Traits::prefetch(ahead + table_bytes<TD>(tail));
  if constexpr (kRowwiseQuantized<TD>) Traits::prefetch(ahead + params_offset);
}

// The rows of ids [first, last) (at most kStagedRows of them), copied in whole lines: a row's last
// line is inside its stride, a multiple of 64 (FORMAT.md 4). Each row has a slot of kNarrowRowBytes,
// or kStagedRowBytes when it is wider (slots of a narrow row's own lines, 192 bytes for int8 128,
// gathered 0.95x [0.92-0.97] as fast as 320).
struct RowStage {
  alignas(64) std::byte rows[kStagedRows * kStagedRowBytes];
  std::uint64_t first = 0, last = 0, slot = 0;

  // What row_of(i) gives fill for id i: its table row, and a row whose lines are prefetched as that
  // row's are copied, or none (a caller's place to prefetch the rows ahead otherwise).
  struct Source {
    const std::byte* row;
    const std::byte* ahead;
  };
  const std::byte* row(std::uint64_t i) const noexcept { return rows + (i - first) * slot; }
  template <typename RowOf>
  __attribute__((always_inline)) void fill(std::uint64_t from, std::uint64_t to, std::uint64_t table_row_bytes,
                                           RowOf row_of) noexcept {
    first = from;
    last = to;
    slot = table_row_bytes <= kNarrowRowBytes ? kNarrowRowBytes : kStagedRowBytes;
    const std::uint64_t line_bytes = whole_lines(table_row_bytes);
    for (std::uint64_t i = from; i < to; ++i) {
      const Source source = row_of(i);
      std::byte* copy = rows + (i - from) * slot;
      if (source.ahead != nullptr) {
        for (std::uint64_t l = 0; l < line_bytes; l += 64) {
          __builtin_memcpy(copy + l, source.row + l, 64);
          Traits::prefetch(source.ahead + l);
        }
      } else {
        for (std::uint64_t l = 0; l < line_bytes; l += 64) __builtin_memcpy(copy + l, source.row + l, 64);
      }
    }
  }
};

// Rows without LayerNorm: one pass. The vector body starts at `head`, the first element whose
// output address is vector-aligned when streaming (stores that bypass the cache need it), else 0;
// elements before it and after the last full vector take the scalar path, with identical rounding.
// `ahead`: a row whose lines are prefetched as this one's are loaded (prefetch_line_ahead), or none.
// Forced inline, as copy_row and PositionCursor::next: GCC stopped inlining them into the gather
// once it had a copy per id path, a call per row.
template <DType TD, OutputDType OD>
__attribute__((always_inline)) inline void embed_row(const KernelArgs& a, const std::byte* tok, const std::byte* seg,
                                                     const std::byte* pos, std::byte* out, bool stream,
                                                     const std::byte* ahead = nullptr) {
  using V = typename Traits::V;
  constexpr std::uint64_t W = Traits::kWidth;
  const std::uint64_t dim = a.dim;
  constexpr std::uint64_t kVectorBytes = W * out_size(OD);  // output bytes one vector store writes
  std::uint64_t head = 0;
  if (stream) {
    const auto misalignment = reinterpret_cast<std::uintptr_t>(out) % kVectorBytes;
    const std::uint64_t peel = misalignment ? (kVectorBytes - misalignment) / out_size(OD) : 0;
    head = peel < dim ? peel : dim;
  }
  const std::uint64_t body_end = head + (dim - head) / W * W;
  float ts, tb, ss = 1, sb = 0, ps = 1, pb = 0;
  row_quantization<TD>(tok, a.params_offset, ts, tb);
  if (seg) row_quantization<TD>(seg, a.params_offset, ss, sb);
  if (pos) row_quantization<TD>(pos, a.params_offset, ps, pb);
  const bool scaled = a.scale != 1.0f;
  const bool token_scaled = a.token_scale != 1.0f;
  const auto scalar = [&](std::uint64_t j) {
    float x = load_one<TD>(tok, j, ts, tb);
    if (token_scaled) x = x * a.token_scale;
    if (seg) x = x + load_one<TD>(seg, j, ss, sb);
    if (pos) x = x + load_one<TD>(pos, j, ps, pb);
    if (scaled) x = x * a.scale;
    store_one<OD>(out, j, x);
  };
  for (std::uint64_t j = 0; j < head; ++j) scalar(j);
  const V scale(a.scale);
  const V token_scale(a.token_scale);
  // The common sums have loops of their own, chosen once per row: GCC keeps the general loop's test
  // for each term in every vector. GPT-2's and OPT's token + position had one first (see a80857d);
  // a row alone (Llama's 16-bit or quantized table into f32, a converted copy) and a row times the
  // token scale (Gemma's) since. Against the general loop (bench/ab.py, 32 MiB-L3 Zen 3, AVX2, 1
  // thread, cpu clock, 5 rounds, dim 768 into f32): a row alone from a table in the LLC int4 1.83x,
  // int8 1.12x, f16 1.19x, bf16 1.35x; from tables 3.9x the LLC int4 1.13x, int8 1.10x, f16 1.18x,
  // bf16 2048 1.15x; bf16 768 times its scale 1.15x (cached 1.16x); with 2 threads, where both
  // cores wait on memory, f16 768 1.02x, int4 768 1.01x; controls GPT-2 f32 + positions 0.98-1.01x,
  // f32 768 copies (another loop) 0.97x. On a 32 MiB-L3 Zen 5 with AVX-512 (same A/B): int8 and
  // int4 768 -> bf16 in the LLC 1.77x and 1.82x, int4 -> f16 from memory 1.36x, int4 -> f32 in the
  // LLC 1.06x; into f32 from memory, GPT-2 f32 + positions and f32 copies 0.98-1.05x.
  // Both lambdas are forced inline (kernels.inlined_lambdas checks): with four sums GCC made them
  // functions for int4 rows into any output and int8 rows into bf16, whose loops reloaded the
  // captured row pointers and scales, and rebuilt the int4 lookup table, every vector, as the byte
  // stores might alias them. Inlined, against that (the same Zen 5): int4 768 -> f32 in the LLC
  // 1.19x, from memory 1.07x, -> f16 from memory 2.18x, -> bf16 1.84x, int8 768 -> bf16 1.94x, int4
  // GPT-2 + positions -> bf16 1.82x; forced AVX2: int4 1.37x, int8 -> bf16 1.30x, GPT-2 f32 +
  // positions 1.05x; int8, f16 and bf16 768 -> f32 1.00-1.02x.
  enum class Sum { kToken, kScaledToken, kTokenPlusPosition, kGeneral };
  const auto body = [&]<bool kOddHead, Sum kSum>() __attribute__((always_inline)) {
    for (std::uint64_t j = head; j < body_end; j += W) {
      V x = load_with_parity<TD, kOddHead>(tok, j, ts, tb);
      if (ahead != nullptr) prefetch_line_ahead<table_bytes<TD>(W)>(ahead, table_bytes<TD>(j));
      if constexpr (kSum == Sum::kScaledToken) {
        x = x * token_scale;
      } else if constexpr (kSum == Sum::kTokenPlusPosition) {
        x = x + load_with_parity<TD, kOddHead>(pos, j, ps, pb);
      } else if constexpr (kSum == Sum::kGeneral) {
        if (token_scaled) x = x * token_scale;
        if (seg) x = x + load_with_parity<TD, kOddHead>(seg, j, ss, sb);
        if (pos) x = x + load_with_parity<TD, kOddHead>(pos, j, ps, pb);
        if (scaled) x = x * scale;
      }
      store<OD>(out, j, x, stream);
    }
  };
  const bool token_alone = pos == nullptr && seg == nullptr && !scaled;
  const auto body_of_sum = [&]<bool kOddHead>() __attribute__((always_inline)) {
    if (token_alone && !token_scaled) {
      body.template operator()<kOddHead, Sum::kToken>();
    } else if (token_alone) {
      body.template operator()<kOddHead, Sum::kScaledToken>();
    } else if (pos != nullptr && seg == nullptr && !token_scaled && !scaled) {
      body.template operator()<kOddHead, Sum::kTokenPlusPosition>();
    } else {
      body.template operator()<kOddHead, Sum::kGeneral>();
    }
  };
  if constexpr (TD == DType::kInt4Rowwise) {
    if (head % 2 != 0) {
      body_of_sum.template operator()<true>();
    } else {
      body_of_sum.template operator()<false>();
    }
  } else {
    body_of_sum.template operator()<false>();
  }
  prefetch_rest_ahead<TD>(ahead, body_end, dim, a.params_offset);
  for (std::uint64_t j = body_end; j < dim; ++j) scalar(j);
}

// LayerNorm statistics are sums over the row in one order for every ISA, so a fleet of mixed CPUs
// returns identical bits: 16 lanes (lane l holds elements l, l + 16, l + 32, ...; one AVX-512
// vector, two AVX2, four SSE, sixteen scalars), the lanes added 0..15 in order, then the elements
// past the last multiple of 16 in order.
constexpr std::uint64_t kNormLanes = 16;

template <typename Value>
inline float lane_ordered_sum(std::uint64_t dim, Value&& value) {
  using V = typename Traits::V;
  constexpr std::uint64_t W = Traits::kWidth;
  static_assert(kNormLanes % W == 0, "a vector must hold a whole number of lanes");
  constexpr std::uint64_t kVectors = kNormLanes / W;
  V acc[kVectors];
  for (std::uint64_t v = 0; v < kVectors; ++v) acc[v] = V(0.0f);
  const std::uint64_t body = dim - dim % kNormLanes;
  for (std::uint64_t j = 0; j < body; j += kNormLanes) {
    for (std::uint64_t v = 0; v < kVectors; ++v) acc[v] = acc[v] + value.vector(j + v * W);
  }
  alignas(64) float lanes[kNormLanes];
  for (std::uint64_t v = 0; v < kVectors; ++v) Traits::store_f32(reinterpret_cast<std::byte*>(lanes + v * W), acc[v], false);
  float sum = 0.0f;
  for (std::uint64_t l = 0; l < kNormLanes; ++l) sum += lanes[l];
  for (std::uint64_t j = body; j < dim; ++j) sum += value.one(j);
  return sum;
}

struct NormStatistics {
  float mean, inverse;  // inverse = 1 / sqrt(variance + epsilon)
};

// (x - mean)^2, element j or W from j, for the variance.
template <typename Source>
struct SquaredDeviation {
  const Source& x;
  float mean;
  typename Traits::V vector(std::uint64_t j) const {
    const typename Traits::V d = x.vector(j) - typename Traits::V(mean);
    return d * d;
  }
  float one(std::uint64_t j) const {
    const float d = x.one(j) - mean;
    return d * d;
  }
};

// Rows with LayerNorm: passes over one row, which stays in L1/L2 between them (f32 output: x
// staged, its sum, the squared deviations, the normalization). The summed embedding x is staged in
// the output row when the output is f32, and recomputed from the (cached) table rows otherwise, so
// no row-sized buffer lives on the caller's stack. Summing x in the staging pass (one pass fewer,
// the same bits) ran 0.98x [0.95-0.99] on a BERT-shaped table 4.3x the LLC (bench/ab.py, 7 rounds):
// past the LLC these rows wait on memory, not on the passes. `ahead`: with an f32 output, a row
// whose lines are prefetched as the staging pass loads this one's (prefetch_line_ahead), or none.
template <DType TD, OutputDType OD>
inline void embed_row_norm(const KernelArgs& a, const std::byte* tok, const std::byte* seg, const std::byte* pos,
                           std::byte* out, const std::byte* ahead = nullptr) {
  using V = typename Traits::V;
  constexpr std::uint64_t W = Traits::kWidth;
  const std::uint64_t dim = a.dim, body = dim - dim % W;
  float ts, tb, ss = 1, sb = 0, ps = 1, pb = 0;
  row_quantization<TD>(tok, a.params_offset, ts, tb);
  if (seg) row_quantization<TD>(seg, a.params_offset, ss, sb);
  if (pos) row_quantization<TD>(pos, a.params_offset, ps, pb);
  const bool scaled = a.scale != 1.0f;
  const bool token_scaled = a.token_scale != 1.0f;
  // x, the summed (and scaled) embedding, computed from the tables: element j, or W from j.
  struct Computed {
    const KernelArgs& a;
    const std::byte *tok, *seg, *pos;
    float ts, tb, ss, sb, ps, pb;
    bool scaled, token_scaled;
    V vector(std::uint64_t j) const {
      V x = load<TD>(tok, j, ts, tb);
      if (token_scaled) x = x * V(a.token_scale);
      if (seg) x = x + load<TD>(seg, j, ss, sb);
      if (pos) x = x + load<TD>(pos, j, ps, pb);
      if (scaled) x = x * V(a.scale);
      return x;
    }
    float one(std::uint64_t j) const {
      float x = load_one<TD>(tok, j, ts, tb);
      if (token_scaled) x = x * a.token_scale;
      if (seg) x = x + load_one<TD>(seg, j, ss, sb);
      if (pos) x = x + load_one<TD>(pos, j, ps, pb);
      if (scaled) x = x * a.scale;
      return x;
    }
  };
  const Computed computed{a, tok, seg, pos, ts, tb, ss, sb, ps, pb, scaled, token_scaled};
  // x as staged: the f32 output row holds it after pass 1.
  struct Staged {
    const float* row;
    V vector(std::uint64_t j) const { return Traits::load_f32(reinterpret_cast<const std::byte*>(row + j)); }
    float one(std::uint64_t j) const { return row[j]; }
  };
  const Staged staged{reinterpret_cast<const float*>(out)};
  constexpr bool kStaged = OD == OutputDType::kF32;
  if constexpr (kStaged) {
    for (std::uint64_t j = 0; j < body; j += W) {
      if (ahead != nullptr) prefetch_line_ahead<table_bytes<TD>(W)>(ahead, table_bytes<TD>(j));
      Traits::store_f32(out + 4 * j, computed.vector(j), false);
    }
    prefetch_rest_ahead<TD>(ahead, body, dim, a.params_offset);
    for (std::uint64_t j = body; j < dim; ++j) store_one<OD>(out, j, computed.one(j));
  }
  const auto statistics = [&](const auto& x) {
    const float mean = lane_ordered_sum(dim, x) / static_cast<float>(dim);
    using Source = std::remove_cvref_t<decltype(x)>;
    const float variance = lane_ordered_sum(dim, SquaredDeviation<Source>{x, mean}) / static_cast<float>(dim);
    return NormStatistics{mean, 1.0f / __builtin_sqrtf(variance + a.epsilon)};
  };
  const auto normalize = [&](const auto& x, float mean, float inverse) {
    const V vmean(mean), vinverse(inverse);
    const std::byte* w = reinterpret_cast<const std::byte*>(a.norm_weight);
    const std::byte* b = reinterpret_cast<const std::byte*>(a.norm_bias);
    for (std::uint64_t j = 0; j < body; j += W) {
      V y = (x.vector(j) - vmean) * vinverse * Traits::load_f32(w + 4 * j);
      if (b) y = y + Traits::load_f32(b + 4 * j);
      store<OD>(out, j, y, false);
    }
    for (std::uint64_t j = body; j < dim; ++j) {
      float y = (x.one(j) - mean) * inverse * a.norm_weight[j];
      if (b) y += a.norm_bias[j];
      store_one<OD>(out, j, y);
    }
  };
  if constexpr (kStaged) {
    const NormStatistics st = statistics(staged);
    normalize(staged, st.mean, st.inverse);
  } else {
    const NormStatistics st = statistics(computed);
    normalize(computed, st.mean, st.inverse);
  }
}

// A row of 16-bit values from `in` to `out` as they are: vector loads and stores move bits, they
// round nothing. Streaming stores need vector-aligned addresses: the values before the first one
// are copied one by one (`out` is 2-byte aligned whenever the kernel streams). `ahead`: a row whose
// lines are prefetched as this one's are loaded (prefetch_line_ahead), or none.
__attribute__((always_inline)) inline void copy_row(std::byte* out, const std::byte* in, std::uint64_t bytes, bool stream,
                                                    const std::byte* ahead) {
  constexpr std::uint64_t kVectorBytes = 4 * Traits::kWidth;
  std::uint64_t k = 0;
  if (stream) {
    for (; k < bytes && reinterpret_cast<std::uintptr_t>(out + k) % kVectorBytes != 0; k += 2) {
      store_u16(out + k, load_u16(in + k));
    }
  }
  for (; k + kVectorBytes <= bytes; k += kVectorBytes) {
    const auto x = Traits::load_f32(in + k);
    if (ahead != nullptr) prefetch_line_ahead<kVectorBytes>(ahead, k);
    Traits::store_f32(out + k, x, stream);
  }
  if (ahead != nullptr && k < bytes) Traits::prefetch(ahead + k);
  for (; k < bytes; k += 2) store_u16(out + k, load_u16(in + k));
}

// Starts the arrival of token i's row (the part of it `plan` says), for the gather.
template <DType TD, IdPath P>
struct RowPrefetcher {
  TokenRows<P> rows;
  PrefetchPlan plan;
  std::uint64_t table_row_bytes, params_offset;

  __attribute__((always_inline)) void operator()(std::uint64_t i) const noexcept {
    prefetch_row<TD>(rows(i), plan.bytes, table_row_bytes, params_offset);
  }
};

// Tokens [begin, end) whose rows leave as they are (see embed_tokens), from `out` on. Its own
// function, so that GCC gives its few values registers: inside embed_tokens they lived on the
// stack beside the general loop's.
// kInterleaved: the row `distance` ahead is prefetched line by line as this one is copied
// (interleaved_plan), else the plan's part of it at the top of the loop.
template <bool kInterleaved, DType TD, IdPath P>
__attribute__((noinline)) void copy_tokens(const RowPrefetcher<TD, P> prefetch, std::uint64_t begin, std::uint64_t end,
                                           std::uint64_t ahead_end, std::byte* out, std::uint64_t row_bytes, bool stream) {
  const std::uint64_t distance = prefetch.plan.distance;
  for (std::uint64_t i = begin; i < end; ++i, out += row_bytes) {
    const std::byte* row = prefetch.rows(i);
    if constexpr (kInterleaved) {
      copy_row(out, row, row_bytes, stream, i + distance < ahead_end ? prefetch.rows(i + distance) : nullptr);
    } else {
      if (i + distance < ahead_end) prefetch(i + distance);
      copy_row(out, row, row_bytes, stream, nullptr);
    }
  }
  if (stream) Traits::fence();
}

// Token i's segment row, or none.
__attribute__((always_inline)) inline const std::byte* segment_row(const KernelArgs& a, std::uint64_t i) noexcept {
  if (a.segment == nullptr) return nullptr;
  return a.segment + (a.segment_ids.data == nullptr ? 0 : id_at(a.segment_ids, i)) * a.segment_stride;
}

template <DType TD, OutputDType OD, bool kNorm, IdPath P>
void embed_tokens(const KernelArgs& a, std::uint64_t begin, std::uint64_t end) {
  const std::uint64_t dim = a.dim;
  const std::uint64_t out_row_bytes = dim * out_size(OD);
  // Computed by the caller: row_bytes() is baseline code, and a call from here made GCC save and
  // restore the vector registers it holds around it, a few ns of a single-token call.
  const std::uint64_t table_row_bytes = a.row_bytes;
  std::byte* out = static_cast<std::byte*>(a.out) + begin * out_row_bytes;
  // Streaming (non-temporal) stores; each row peels to vector alignment, which needs the output
  // aligned to its element size.
  const bool stream = !kNorm && a.nontemporal && Traits::kCanStream &&
                      reinterpret_cast<std::uintptr_t>(out) % out_size(OD) == 0;
  // A row that leaves as it is (the output dtype is the table's, nothing added or scaled) is
  // copied. For a 16-bit row, converting it to f32 and rounding it back is the identity except that
  // it quiets a signalling NaN, which torch's gather does not do either, and the conversion and
  // rounding cost Llama-3's bf16 -> bf16 gather a quarter of its time (see the commit). An f32 row
  // went through embed_row's loads and stores, bits unchanged, but its checks for the rows to add
  // cost f32 dim 64-128 5-12% of their time (see the commit).
  constexpr bool kSameBits = !kNorm && ((TD == DType::kBF16 && OD == OutputDType::kBF16) ||
                                        (TD == DType::kF16 && OD == OutputDType::kF16) ||
                                        (TD == DType::kF32 && OD == OutputDType::kF32));
  const bool copies_rows = kSameBits && a.segment == nullptr && a.position == nullptr && a.scale == 1.0f &&
                           a.token_scale == 1.0f;
  // Rows prefetch the row ahead as they load this one (interleaved_plan), except copies of
  // rows wider than 8 KiB and LayerNorm rows into a 16-bit output, which take gather_prefetch_plan
  // at the top of their loop.
  constexpr bool kInterleavesRows = !kNorm || OD == OutputDType::kF32;
  const bool staged = !kNorm && stages_rows<TD>(table_row_bytes, a.token_rows_from_memory);
  const bool interleaved = kInterleavesRows && (!copies_rows || table_row_bytes <= kInterleavedCopyRowBytes);
  const RowPrefetcher<TD, P> prefetch{TokenRows<P>{a},
                                      interleaved ? interleaved_plan(table_row_bytes, a.min_rows_ahead)
                                                  : gather_prefetch_plan(table_row_bytes, out_row_bytes),
                                      table_row_bytes, a.params_offset};
  const std::uint64_t distance = prefetch.plan.distance;
  // Rows ahead are prefetched up to the call's end, past the range's (KernelArgs::steps).
  const std::uint64_t ahead_end = a.steps > end ? a.steps : end;
  // The range's first rows, before the loop's prefetches `distance` tokens ahead reach them; not the
  // very first, whose loads come next anyway (prefetching it cost a warm single-token call 4-5 ns).
  {
    StepOrder first(a, begin + 1);
    for (std::uint64_t v = begin + 1; v < ahead_end && v < begin + distance; ++v, first.next()) prefetch(first.token());
  }
  if constexpr (kSameBits) {
    if (copies_rows) {
      return interleaved ? copy_tokens<true>(prefetch, begin, end, ahead_end, out, out_row_bytes, stream)
                         : copy_tokens<false>(prefetch, begin, end, ahead_end, out, out_row_bytes, stream);
    }
  }
  // Steps, not tokens, from here: `order` is the step being embedded, `ahead` the one prefetched.
  std::byte* const out_base = static_cast<std::byte*>(a.out);
  StepOrder order(a, begin);
  PositionCursor positions(a, begin);  // token order's positions
  const auto position_row = [&]() __attribute__((always_inline)) -> const std::byte* {
    if (a.position == nullptr) return nullptr;
    const std::uint64_t p = order.position_major() ? a.start + order.column() + a.position_offset : positions.next();
    return a.position + p * a.position_stride;
  };
  if constexpr (!kNorm) {
    if (staged) {
      RowStage stage;
      StepOrder copied(a, begin), copied_ahead(a, begin + distance);  // the stage's fill, one step at a time
      for (std::uint64_t block = begin; block < end; block += kStagedRows) {
        stage.fill(block, block + kStagedRows < end ? block + kStagedRows : end, table_row_bytes,
                   [&](std::uint64_t v) {
                     const RowStage::Source source{prefetch.rows(copied.token()),
                                                   v + distance < ahead_end ? prefetch.rows(copied_ahead.token()) : nullptr};
                     copied.next();
                     copied_ahead.next();
                     return source;
                   });
        for (std::uint64_t v = block; v < stage.last; ++v, order.next()) {
          const std::uint64_t i = order.token();
          const std::byte* pos = position_row();
          embed_row<TD, OD>(a, stage.row(v), segment_row(a, i), pos, out_base + i * out_row_bytes, stream);
        }
      }
      if (stream) Traits::fence();
      return;
    }
  }
  StepOrder ahead(a, begin + distance);
  for (std::uint64_t v = begin; v < end; ++v, order.next(), ahead.next()) {
    const std::uint64_t i = order.token();
    const std::byte* tok = prefetch.rows(i);
    const std::byte* ahead_row = nullptr;
    if constexpr (kInterleavesRows) {  // (copied and staged rows took the loops above)
      ahead_row = v + distance < ahead_end ? prefetch.rows(ahead.token()) : nullptr;
    } else if (v + distance < ahead_end) {
      prefetch(ahead.token());
    }
    const std::byte* seg = segment_row(a, i);
    const std::byte* pos = position_row();
    std::byte* const row_out = out_base + i * out_row_bytes;
    if constexpr (kNorm) {
      embed_row_norm<TD, OD>(a, tok, seg, pos, row_out, ahead_row);
    } else {
      embed_row<TD, OD>(a, tok, seg, pos, row_out, stream, ahead_row);
    }
  }
  if (stream) Traits::fence();
}

// LayerNorm rows take the general path: their arithmetic, not finding their rows, sets their pace.
template <DType TD, OutputDType OD>
void embed_range(const KernelArgs& a, std::uint64_t begin, std::uint64_t end) {
  if (a.norm_weight != nullptr) return embed_tokens<TD, OD, true, IdPath::kGeneral>(a, begin, end);
  if (a.id_map != nullptr || a.zero_outside_rows != 0) return embed_tokens<TD, OD, false, IdPath::kGeneral>(a, begin, end);
  switch (plain_id_path(a.ids)) {
    case IdPath::kPlainWide: return embed_tokens<TD, OD, false, IdPath::kPlainWide>(a, begin, end);
    default: return embed_tokens<TD, OD, false, IdPath::kPlainNarrow>(a, begin, end);
  }
}

#include "kernels/bag_body.inl"

}  // namespace

// The table this ISA exports: [table dtype][output dtype].
#define EMBEDRT_KERNELS(TD, F) {&F<TD, OutputDType::kF32>, &F<TD, OutputDType::kBF16>, &F<TD, OutputDType::kF16>}
const KernelTable kTable = {
    {EMBEDRT_KERNELS(DType::kF32, embed_range), EMBEDRT_KERNELS(DType::kF16, embed_range),
     EMBEDRT_KERNELS(DType::kBF16, embed_range), EMBEDRT_KERNELS(DType::kInt8Rowwise, embed_range),
     EMBEDRT_KERNELS(DType::kInt4Rowwise, embed_range)},
    {EMBEDRT_KERNELS(DType::kF32, pool_bags), EMBEDRT_KERNELS(DType::kF16, pool_bags),
     EMBEDRT_KERNELS(DType::kBF16, pool_bags), EMBEDRT_KERNELS(DType::kInt8Rowwise, pool_bags),
     EMBEDRT_KERNELS(DType::kInt4Rowwise, pool_bags)},
};
#undef EMBEDRT_KERNELS
