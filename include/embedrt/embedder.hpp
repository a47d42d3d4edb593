// The fast embedding path: a vectorized, multithreaded gather-and-add over a Model's tables.
//
//   auto embedder = embedrt::Embedder::create(model);          // picks kernels once
//   embedrt::EmbedRequest request;
//   request.ids = ids;                                         // int32 or int64, [B, L] or ragged
//   request.sequences = B;
//   embedrt::Status s = embedder->embed(request, embedrt::OutputSpan(out));
//
// The token, position and segment tables must share one dtype (the converter always writes them
// so); LayerNorm weights are f32.
//
// A model may have several outputs (Gemma 3n: inputs_embeds and per_layer_inputs); embed() with
// one OutputSpan computes the primary one, embed() with OutputTargets any of them.
//
// Thread safety: an Embedder is immutable. Any number of threads may call embed() on one
// Embedder at once. embed() allocates nothing and takes no lock on its own behalf (oneTBB's
// scheduler is used for large requests); every id, segment and position is validated before
// anything is written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <oneapi/tbb/task_arena.h>

#include "embedrt/error.hpp"
#include "embedrt/isa.hpp"
#include "embedrt/model.hpp"

namespace embedrt {

// A read-only view of token (or segment, or position) ids of either integer width.
class IdSpan {
 public:
  IdSpan() = default;
  IdSpan(std::span<const std::int64_t> ids) : data_(ids.data()), size_(ids.size()), wide_(true) {}  // NOLINT
  IdSpan(std::span<const std::int32_t> ids) : data_(ids.data()), size_(ids.size()), wide_(false) {}  // NOLINT
  template <typename Container>
    requires requires(const Container& c) { std::span(c); }
  IdSpan(const Container& c) : IdSpan(std::span(c)) {}  // NOLINT

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  bool is_int64() const noexcept { return wide_; }
  const void* data() const noexcept { return data_; }
  std::int64_t operator[](std::size_t i) const noexcept {
    return wide_ ? static_cast<const std::int64_t*>(data_)[i] : static_cast<const std::int32_t*>(data_)[i];
  }

 private:
  const void* data_ = nullptr;
  std::size_t size_ = 0;
  bool wide_ = true;
};

enum class OutputDType { kF32, kBF16, kF16 };

// 16-bit output elements as distinct types, so a span says which format it holds and a buffer
// of one cannot be passed as the other, or as float32 (bf16_to_f32 / f16_to_f32 in half.hpp
// decode `bits`).
struct BFloat16 {
  std::uint16_t bits;
};
struct Float16 {
  std::uint16_t bits;
};
static_assert(sizeof(BFloat16) == 2 && sizeof(Float16) == 2);

// The caller's output buffer: ids.size() * dim elements; its element type is its dtype.
class OutputSpan {
 public:
  OutputSpan(std::span<float> out) : data_(out.data()), size_(out.size()), dtype_(OutputDType::kF32) {}  // NOLINT
  OutputSpan(std::span<BFloat16> out) : data_(out.data()), size_(out.size()), dtype_(OutputDType::kBF16) {}  // NOLINT
  OutputSpan(std::span<Float16> out) : data_(out.data()), size_(out.size()), dtype_(OutputDType::kF16) {}  // NOLINT

  // Raw bytes holding elements of a dtype chosen at run time (a server, the C API): refuses an
  // unknown dtype value and a byte count that is not a whole number of elements.
  static Result<OutputSpan> from_bytes(std::span<std::byte> out, OutputDType dtype);

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }  // elements
  OutputDType dtype() const noexcept { return dtype_; }

 private:
  OutputSpan(void* data, std::size_t size, OutputDType dtype) : data_(data), size_(size), dtype_(dtype) {}
  void* data_;
  std::size_t size_;
  OutputDType dtype_;
};

// Bytes of one output element (4 or 2); 0 for a value outside the enum.
std::size_t output_element_bytes(OutputDType dtype) noexcept;

// One output of a request: which (Model::outputs() index) and the buffer it goes to
// (ids.size() * that output's dim elements).
struct OutputTarget {
  std::size_t output = 0;
  OutputSpan span;
};

// The output dtype transformers gives for this output of the model: its token table's 16-bit
// dtype (bf16, f16), else f32; an int8 table follows the dtype of the checkpoint it came from
// (metadata source.dtype).
OutputDType natural_output_dtype(const Model& model, std::size_t output = 0) noexcept;
std::string_view output_dtype_name(OutputDType dtype) noexcept;  // "f32", "bf16", "f16"

struct EmbedRequest {
  IdSpan ids;  // all sequences back to back

  // Sequence layout: either `sequences` of equal length, or ragged boundaries
  // (sequence_offsets.size() == sequences + 1, offsets[0] == 0, last == ids.size()).
  std::uint64_t sequences = 1;
  std::span<const std::uint64_t> sequence_offsets;

  // Positions: explicit per-token position ids, else a start per sequence (decoding with a KV
  // cache continues at the cached length), else `start` for every sequence. The model's
  // position offset (OPT, RoBERTa) is added by the library.
  IdSpan position_ids;
  std::span<const std::uint64_t> start_positions;
  std::uint64_t start = 0;

  // Token types (BERT); empty means type 0 where the model has a segment table.
  IdSpan segment_ids;
};

// Where Embedder::prefetch brings rows.
enum class PrefetchTarget {
  kCache,   // the calling core's caches (software prefetches: no system call, returns at once)
  kMemory,  // also asks the OS to read the rows' pages in (madvise WILLNEED), for a cold mapping
};

// Bags (FORMAT.md 7.2): pooled rows, one vector per bag, as PyTorch's EmbeddingBag and static
// sentence-embedding models (model2vec) compute them.
struct BagRequest {
  IdSpan ids;  // all bags back to back
  // Bag layout: ragged boundaries (offsets.size() == bags + 1, offsets[0] == 0, last ==
  // ids.size()), or, when offsets is empty, `bags` bags of equal size. An empty bag pools to zeros.
  std::span<const std::uint64_t> offsets;
  std::uint64_t bags = 1;
  // One weight per id (PyTorch's per_sample_weights): each row is multiplied by its weight before
  // it is summed. Empty: the output's per-token weights table if it has one, else 1.
  std::span<const float> weights;
  std::optional<PoolingMode> mode;  // sum, mean or max; default: the output's pooling.mode
  std::optional<bool> normalize;    // L2-normalize each pooled vector; default: the output's pooling.normalize
};

// Streaming stores for a call's output (embed and pool alike): they skip the read of each line
// before it is written, and leave the output out of the cache.
enum class NonTemporal {
  kAuto,    // stream stores when the call's output exceeds half the last-level cache (a measured crossover)
  kAlways,
  kNever,
};

std::string_view nontemporal_name(NonTemporal mode) noexcept;  // "auto", "always", "never"
std::optional<NonTemporal> parse_nontemporal(std::string_view name) noexcept;
// Whether a call that writes `output_bytes` streams them under `mode`, given a last-level cache of
// `llc_bytes`: the rule the Embedder applies (and the benchmark's roofline with it).
bool streams_output(NonTemporal mode, std::uint64_t output_bytes, std::uint64_t llc_bytes) noexcept;

// Where the kernels' software prefetches bring the rows of a table larger than half the
// last-level cache (rows that come from memory), in a gather and in bags alike. The rows of a
// smaller table always go to L1, and so do all rows with the scalar and SSE4.2 kernels, or in a
// library built with EMBEDRT_PREFETCH_L2_KERNELS=OFF. No choice changes a result's bits.
enum class PrefetchLevel {
  kL1,  // into L1 (x86 prefetcht0), as FBGEMM's kernels
  // Only as far as L2 (prefetcht1). Machines differ: on a Zen 5 guest whose random reads from
  // memory are slow (163 ns per miss) L2 gathered and pooled 1.1-2.9x faster; on another Zen 5 it
  // lost, 0.88-0.90x (docs/BENCHMARKS.md, "Choosing the prefetch level").
  kL2,
  // The default: the level this machine's calibration chose (prefetch_calibration), measured by
  // the first Embedder that has a table larger than half the LLC and L2 kernels to choose.
  kAuto,
};

std::string_view prefetch_level_name(PrefetchLevel level) noexcept;  // "l1", "l2", "auto"
std::optional<PrefetchLevel> parse_prefetch_level(std::string_view name) noexcept;

// What PrefetchLevel::kAuto measured on this machine: random 1 KiB rows gathered by the kernels of
// each level from a private table of 4x the LLC (within 64-256 MiB), 7 interleaved rounds of
// 16 MiB each; then, by the chosen level's kernels, the same rows pooled in bags of 32 with rows
// of up to 1 KiB prefetched about 8 KiB of rows ahead (near) and at least 32 rows ahead (far),
// 15 interleaved rounds of 16 MiB. It costs about 0.2 s and that memory for a moment, once per process,
// ISA and page size; later calls return the same answer. Both choices apply to the outputs whose
// level is kAuto and whose tables are larger than half the LLC; no choice changes a result's bits.
struct PrefetchCalibration {
  PrefetchLevel level = PrefetchLevel::kL1;  // kL2 when its median rate is at least 5% above L1's
  double l1_gbs = 0;                         // median GB/s of rows read, prefetching into L1
  double l2_gbs = 0;                         // the same, into L2
  std::uint64_t min_rows_ahead = 4;          // 32 when far's median rate is at least 5% above near's
  double near_gbs = 0;                       // median GB/s of rows pooled, about 8 KiB of rows ahead
  double far_gbs = 0;                        // the same, at least 32 rows ahead
  std::uint64_t table_bytes = 0;             // the private table's size
  std::string note;                          // why nothing was measured, when nothing was ("" otherwise)
};
// `huge_pages`: the table in 2 MiB pages (as Residency::kCopy holds a model) rather than 4 KiB ones.
// An ISA without L2 kernels measures nothing: kL1, with a note.
const PrefetchCalibration& prefetch_calibration(Isa isa, bool huge_pages = false);

struct EmbedderOptions {
  std::optional<Isa> isa;                     // force an ISA (must be supported); default_isa() otherwise
  tbb::task_arena* arena = nullptr;           // run inside this arena; the default arena otherwise
  NonTemporal nontemporal = NonTemporal::kAuto;
  std::size_t inline_bytes = 256 * 1024;      // requests writing less run on the calling thread
  // The last-level cache the Embedder's memory choices assume (streaming stores under kAuto; for a
  // table larger than half of it, the gather's order and which quantized rows it copies to L1
  // first); default: the cache detected (last_level_cache()). None changes a result's bits.
  std::optional<std::uint64_t> cache_bytes;
  PrefetchLevel prefetch_level = PrefetchLevel::kAuto;
  // The fewest rows ahead that token rows of up to 1 KiB from a table larger than half the LLC are
  // prefetched where the kernel's plan for them takes a floor (most of the gather's rows, the bags'
  // rows that fit in the registers, and 16-bit bag rows pooled in block passes; the other plans keep
  // their own distance), in [4, 256] (Embedder::min_rows_ahead); unset: the calibration's under
  // kAuto (PrefetchCalibration::min_rows_ahead), else 4. Changes no result's bits.
  std::optional<std::uint64_t> min_rows_ahead;
};

class Embedder {
 public:
  static Result<Embedder> create(Model model, const EmbedderOptions& options = {});

  // The primary output (output 0) of every token.
  // (Inline: passed on through an out-of-line call, the span cost a decode call a stalled reload.)
  Status embed(const EmbedRequest& request, OutputSpan out) const {
    const OutputTarget target{0, out};
    return embed(request, std::span(&target, 1));
  }
  // Several outputs of the same tokens, each into its own span (each output at most once).
  Status embed(const EmbedRequest& request, std::span<const OutputTarget> outputs) const;

  // One pooled vector per bag of ids from an output's table (bags x that output's dim elements).
  Status pool(const BagRequest& request, OutputSpan out, std::size_t output = 0) const;

  // Decoding: starts bringing the rows of `ids` (of the given outputs; all outputs when empty)
  // toward the caller and returns without waiting, so that a later embed() of these ids finds
  // them close. Ids outside an output's table are skipped (embed() is where they are refused).
  // Refuses an output index past the model's outputs.
  Status prefetch(IdSpan ids, std::span<const std::size_t> outputs = {},
                  PrefetchTarget target = PrefetchTarget::kCache) const;

  const Model& model() const noexcept { return model_; }
  Isa isa() const noexcept { return isa_; }
  // Where the kernels prefetch an output's token rows: kL2 or kL1, kAuto and the table's size
  // resolved at create (kL1 for an output index past the model's outputs).
  PrefetchLevel prefetch_level(std::size_t output = 0) const noexcept {
    return output < prefetch_levels_.size() ? prefetch_levels_[output] : PrefetchLevel::kL1;
  }
  // The fewest rows ahead that an output's token rows of up to 1 KiB are prefetched, for a table
  // larger than half the LLC: EmbedderOptions::min_rows_ahead, else under kAuto the calibration's
  // (4 or 32), else 4; 4 for a smaller table (about 8 KiB of rows ahead decides) and for an index
  // past the model's outputs.
  std::uint64_t min_rows_ahead(std::size_t output = 0) const noexcept {
    return output < min_rows_ahead_.size() ? min_rows_ahead_[output] : 4;
  }

 private:
  Embedder(Model model, const EmbedderOptions& options, Isa isa, std::uint64_t llc_bytes,
           std::vector<PrefetchLevel> prefetch_levels, std::vector<std::uint64_t> min_rows_ahead)
      : model_(std::move(model)), options_(options), isa_(isa), llc_bytes_(llc_bytes),
        prefetch_levels_(std::move(prefetch_levels)), min_rows_ahead_(std::move(min_rows_ahead)) {}
  Model model_;
  EmbedderOptions options_;
  Isa isa_;
  std::uint64_t llc_bytes_;
  std::vector<PrefetchLevel> prefetch_levels_;  // one per output
  std::vector<std::uint64_t> min_rows_ahead_;   // one per output (PrefetchCalibration::min_rows_ahead)
};

}  // namespace embedrt
