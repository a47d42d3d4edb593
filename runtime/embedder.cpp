// The Embedder: validates a request completely, then runs the kernel of the chosen ISA on the
// calling thread (small requests) or across a oneTBB arena in contiguous chunks (large ones).
#include "embedrt/embedder.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include <cstdlib>
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>
#include <string>

#include "checked_math.hpp"
#include "embedrt/cache_info.hpp"
#include "kernels/kernel_args.hpp"
#include "prefetch_calibration.hpp"

#if defined(__has_feature)
#if __has_feature(thread_sanitizer) && !defined(__SANITIZE_THREAD__)
#define __SANITIZE_THREAD__ 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
// oneTBB from Debian is not built with ThreadSanitizer, so TSan cannot see that parallel_for's
// start orders the caller's writes before the workers' reads, nor that its end orders the
// workers' writes before the caller's reads. These annotations state exactly those two edges.
extern "C" void __tsan_acquire(void* address);
extern "C" void __tsan_release(void* address);
#define EMBEDRT_TSAN_ACQUIRE(address) __tsan_acquire(address)
#define EMBEDRT_TSAN_RELEASE(address) __tsan_release(address)
#else
#define EMBEDRT_TSAN_ACQUIRE(address) ((void)(address))
#define EMBEDRT_TSAN_RELEASE(address) ((void)(address))
#endif

namespace embedrt {
namespace {

// The kernels of a supported ISA (Embedder::create checked): an ISA left out of the build
// (EMBEDRT_BUILT_<unit>=0, cmake/KernelIsas.cmake) has no kernel symbols to name. `into_l2`: the
// AVX2 and AVX-512 kernels that prefetch into L2 only (resolve_prefetch_level); other ISAs have none.
const kernels::KernelTable& kernels_for(Isa isa, bool into_l2 = false) {
  switch (isa) {
    case Isa::kScalar: return kernels::scalar_kernels();
#if EMBEDRT_BUILT_sse42
    case Isa::kSse42: return kernels::sse42_kernels();
#endif
#if EMBEDRT_BUILT_avx2
    case Isa::kAvx2: return into_l2 ? kernels::avx2::prefetch_l2_kernels() : kernels::avx2_kernels();
#endif
#if EMBEDRT_BUILT_avx512
    case Isa::kAvx512: return into_l2 ? kernels::avx512::prefetch_l2_kernels() : kernels::avx512_kernels();
#endif
#if EMBEDRT_BUILT_avx512bf16
    case Isa::kAvx512Bf16:
      return into_l2 ? kernels::avx512bf16::prefetch_l2_kernels() : kernels::avx512bf16_kernels();
#endif
    default: break;
  }
  return kernels::scalar_kernels();
}

// Asks the OS to read in the pages holding [p, p + bytes) (a hint: errors do not matter).
void advise_will_need(const std::byte* p, std::uint64_t bytes) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<std::uintptr_t>(p) & ~(page - 1);
  const auto last = reinterpret_cast<std::uintptr_t>(p) + bytes;
  (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_WILLNEED);
}

// Whether the ISA's kernels come in a set that prefetches into L2 (kernels_for returns another table).
bool has_prefetch_l2_kernels(Isa isa) { return &kernels_for(isa) != &kernels_for(isa, true); }

// Whether a token table's rows come from memory rather than the cache (KernelArgs::
// token_rows_from_memory): it is larger than half the LLC.
bool token_rows_from_memory(std::uint64_t table_bytes, std::uint64_t llc_bytes) { return table_bytes > llc_bytes / 2; }

// Where the kernels prefetch one output's token rows (Embedder::prefetch_level): into L2 only when
// asked for or calibrated so, and the rows come from memory (rows of a table in the LLC gathered
// 0.89x as fast so), and the ISA has such kernels.
PrefetchLevel resolve_prefetch_level(PrefetchLevel asked, Isa isa, std::uint64_t table_bytes, std::uint64_t llc_bytes,
                                     bool huge_pages) {
  if (asked == PrefetchLevel::kL1 || !token_rows_from_memory(table_bytes, llc_bytes)) return PrefetchLevel::kL1;
  if (!has_prefetch_l2_kernels(isa)) return PrefetchLevel::kL1;
  return asked == PrefetchLevel::kL2 ? PrefetchLevel::kL2 : prefetch_calibration(isa, huge_pages).level;
}

// How far ahead the kernels prefetch one output's token rows of up to 1 KiB (KernelArgs::
// min_rows_ahead), for rows from memory: as asked, else as the calibration chose for the outputs
// whose level it chose.
std::uint64_t resolve_min_rows_ahead(const EmbedderOptions& options, Isa isa, std::uint64_t table_bytes,
                                     std::uint64_t llc_bytes, bool huge_pages) {
  if (!token_rows_from_memory(table_bytes, llc_bytes)) return kernels::kNearRowsAhead;
  if (options.min_rows_ahead) return *options.min_rows_ahead;
  if (options.prefetch_level != PrefetchLevel::kAuto) return kernels::kNearRowsAhead;
  return prefetch_calibration(isa, huge_pages).min_rows_ahead;
}

kernels::RawIds raw(const IdSpan& ids) { return {ids.empty() ? nullptr : ids.data(), ids.is_int64()}; }

// A request error with its context: the request field at fault and, for tokens, which one.
Error request_error(ErrorCode code, std::string message, const char* field) {
  return Error(code, std::move(message), {.field = field});
}

// Names the output in messages when the model has several ("output 'name': "), else nothing.
// Built only for an error: a decode call is ~100 ns, and two strings per call were a few of them.
std::string output_prefix(const OutputInfo& o, bool several_outputs) {
  return several_outputs ? "output '" + o.name + "': " : std::string();
}

// `unit` is "sequence" for embed() and "bag" for pool(); ErrorContext::sequence holds its index.
Error out_of_range(std::uint64_t sequence, std::uint64_t position, const char* what, std::int64_t value,
                   std::uint64_t limit, const char* field, const char* unit = "sequence") {
  return Error(ErrorCode::kOutOfRange,
               std::string(unit) + " " + std::to_string(sequence) + ", position " + std::to_string(position) + ": " + what + " " +
                   std::to_string(value) + " is out of range [0, " + std::to_string(limit) + ")",
               {.field = field, .sequence = sequence, .position = position});
}

// Calls visit(i, sequence, position_in_sequence) for every token, in order.
template <typename Visit>
Status for_each_token(const EmbedRequest& r, std::uint64_t n, std::uint64_t length, Visit&& visit) {
  if (!r.sequence_offsets.empty()) {
    for (std::uint64_t s = 0; s < r.sequences; ++s) {
      for (std::uint64_t i = r.sequence_offsets[s]; i < r.sequence_offsets[s + 1]; ++i) {
        if (Status st = visit(i, s, i - r.sequence_offsets[s]); !st) return st;
      }
    }
    return {};
  }
  for (std::uint64_t i = 0; i < n; ++i) {
    if (Status st = visit(i, i / length, i % length); !st) return st;
  }
  return {};
}

}  // namespace

OutputDType natural_output_dtype(const Model& model, std::size_t output) noexcept {
  const auto outputs = model.outputs();
  switch (outputs[output < outputs.size() ? output : 0].token->dtype) {
    case DType::kBF16: return OutputDType::kBF16;
    case DType::kF16: return OutputDType::kF16;
    case DType::kF32: return OutputDType::kF32;
    case DType::kInt8Rowwise:
    case DType::kInt4Rowwise:
    case DType::kInt32: break;  // (an int32 table is never a token table: Model refuses it)
  }
  const std::string& source = model.metadata().source_dtype;
  return source == "bfloat16" ? OutputDType::kBF16 : source == "float16" ? OutputDType::kF16 : OutputDType::kF32;
}

std::string_view output_dtype_name(OutputDType dtype) noexcept {
  switch (dtype) {
    case OutputDType::kF32: return "f32";
    case OutputDType::kBF16: return "bf16";
    case OutputDType::kF16: return "f16";
  }
  return "?";
}

std::string_view prefetch_level_name(PrefetchLevel level) noexcept {
  switch (level) {
    case PrefetchLevel::kL1: return "l1";
    case PrefetchLevel::kL2: return "l2";
    case PrefetchLevel::kAuto: return "auto";
  }
  return "?";
}

std::optional<PrefetchLevel> parse_prefetch_level(std::string_view name) noexcept {
  for (PrefetchLevel level : {PrefetchLevel::kAuto, PrefetchLevel::kL1, PrefetchLevel::kL2}) {
    if (name == prefetch_level_name(level)) return level;
  }
  return std::nullopt;
}

std::string_view nontemporal_name(NonTemporal mode) noexcept {
  switch (mode) {
    case NonTemporal::kAuto: return "auto";
    case NonTemporal::kAlways: return "always";
    case NonTemporal::kNever: return "never";
  }
  return "?";
}

std::optional<NonTemporal> parse_nontemporal(std::string_view name) noexcept {
  for (NonTemporal mode : {NonTemporal::kAuto, NonTemporal::kAlways, NonTemporal::kNever}) {
    if (name == nontemporal_name(mode)) return mode;
  }
  return std::nullopt;
}

Result<Embedder> Embedder::create(Model model, const EmbedderOptions& options) {
  if (options.min_rows_ahead && (*options.min_rows_ahead < kernels::kNearRowsAhead || *options.min_rows_ahead > 256)) {
    return Error(ErrorCode::kInvalidArgument, "min_rows_ahead " + std::to_string(*options.min_rows_ahead) +
                                                  " is outside [4, 256]");
  }
  Isa isa = Isa::kScalar;
  if (options.isa) {
    isa = *options.isa;
  } else {
    auto chosen = default_isa();  // the one place EMBEDRT_ISA is read
    if (!chosen) return std::move(chosen).error();
    isa = *chosen;
  }
  if (!isa_supported(isa)) {
    const char* why = isa_built(isa) ? " is not supported by this CPU/OS" : " is not built into this library";
    return Error(ErrorCode::kUnsupported, "ISA " + std::string(isa_name(isa)) + why);
  }
  for (const OutputInfo& o : model.outputs()) {
    for (const TableView* t : {o.position, o.segment}) {
      if (t != nullptr && t->dtype != o.token->dtype) {
        return Error(ErrorCode::kUnsupported,
                     "'" + model.file().path() + "': the " + std::string(role_name(t->role)) + " table '" + t->name +
                         "' is " + std::string(dtype_name(t->dtype)) + " but its token table '" + o.token->name + "' is " +
                         std::string(dtype_name(o.token->dtype)) + "; convert with a single table `dtype`");
      }
    }
  }
  const std::uint64_t llc_bytes = options.cache_bytes.value_or(last_level_cache().bytes);
  std::vector<PrefetchLevel> prefetch_levels;
  std::vector<std::uint64_t> min_rows_ahead;
  const bool huge_pages = model.file().residency() == Residency::kCopy;
  for (const OutputInfo& o : model.outputs()) {
    const std::uint64_t table_bytes = o.token->bytes.size();
    prefetch_levels.push_back(resolve_prefetch_level(options.prefetch_level, isa, table_bytes, llc_bytes, huge_pages));
    min_rows_ahead.push_back(resolve_min_rows_ahead(options, isa, table_bytes, llc_bytes, huge_pages));
  }
  return Embedder(std::move(model), options, isa, llc_bytes, std::move(prefetch_levels), std::move(min_rows_ahead));
}

const PrefetchCalibration& prefetch_calibration(Isa isa, bool huge_pages) {
  if (!has_prefetch_l2_kernels(isa)) {
    static const PrefetchCalibration nothing_to_choose{.note = "no kernels that prefetch into L2 (scalar, SSE4.2, or a library "
                                                               "built with EMBEDRT_PREFETCH_L2_KERNELS=OFF): L1"};
    return nothing_to_choose;
  }
  return detail::calibrate_prefetch_level(isa, huge_pages, kernels_for(isa).get(DType::kF32, OutputDType::kF32),
                                          kernels_for(isa, true).get(DType::kF32, OutputDType::kF32),
                                          kernels_for(isa).get_bag(DType::kF32, OutputDType::kF32),
                                          kernels_for(isa, true).get_bag(DType::kF32, OutputDType::kF32));
}

std::size_t output_element_bytes(OutputDType dtype) noexcept {
  switch (dtype) {
    case OutputDType::kF32: return 4;
    case OutputDType::kBF16:
    case OutputDType::kF16: return 2;
  }
  return 0;
}

Result<OutputSpan> OutputSpan::from_bytes(std::span<std::byte> out, OutputDType dtype) {
  const std::size_t element = output_element_bytes(dtype);
  if (element == 0) {
    return Error(ErrorCode::kInvalidArgument, "output dtype value " + std::to_string(static_cast<int>(dtype)) +
                                                  " is not f32, bf16 or f16", {.field = "output"});
  }
  if (out.size() % element != 0) {
    return Error(ErrorCode::kInvalidArgument, "output buffer of " + std::to_string(out.size()) + " bytes is not a whole number of " +
                                                  std::string(output_dtype_name(dtype)) + " elements", {.field = "output"});
  }
  return OutputSpan(out.data(), out.size() / element, dtype);
}

namespace {

// With an id map (2.0), every id a request uses must map to a row of the token table: the file's
// data is checked where it is used, since open never reads tables.
Status check_mapped_rows(const OutputInfo& o, const IdSpan& ids, const std::string& file, bool several_outputs) {
  if (o.id_map == nullptr) return {};
  const std::uint64_t vocab = o.vocab_size(), rows = o.token->rows;
  const bool row_zero = o.rules->out_of_range == OutOfRangeIds::kRowZero;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    std::int64_t id = ids[i];
    if (id < 0 || static_cast<std::uint64_t>(id) >= vocab) {
      if (!row_zero) continue;  // refused by the id check
      id = 0;
    }
    const std::int64_t row = o.row_of(static_cast<std::uint64_t>(id));
    if (row < 0 || static_cast<std::uint64_t>(row) >= rows) {
      return Error(ErrorCode::kMalformed,
                   "'" + file + "': " + output_prefix(o, several_outputs) + "ids.map table '" + o.id_map->name +
                       "' maps id " + std::to_string(id) + " to row " + std::to_string(row) +
                       ", outside the token table's " + std::to_string(rows) + " rows",
                   {.file = file, .tensor = o.id_map->name});
    }
  }
  return {};
}

// True when every value of `ids` is in [0, limit): one branch-free pass the compiler vectorizes
// (a negative value is a huge unsigned one).
template <typename Int>
bool all_below(const Int* ids, std::uint64_t n, std::uint64_t limit) {
  bool outside = false;
  for (std::uint64_t i = 0; i < n; ++i) {
    outside |= static_cast<std::uint64_t>(static_cast<std::int64_t>(ids[i])) >= limit;
  }
  return !outside;
}
bool all_below(const IdSpan& ids, std::uint64_t limit) {
  return ids.is_int64() ? all_below(static_cast<const std::int64_t*>(ids.data()), ids.size(), limit)
                        : all_below(static_cast<const std::int32_t*>(ids.data()), ids.size(), limit);
}

// A sufficient condition for validate_for_output's token loop to pass, checked per array and per
// sequence instead of per token (the loop cost 12 ns a token, a quarter of a dim-64 gather):
// every id, segment and position id below its limit, and every sequence's sequential positions
// (start + its length) within the position table, which bounds padding-aware ones too (they
// count only non-pads). When it fails, the token loop runs and names the first offender.
bool surely_valid(const EmbedRequest& r, std::uint64_t length, const OutputInfo& o, bool check_ids,
                  bool check_segments) {
  if (check_ids && !all_below(r.ids, o.vocab_size())) return false;
  if (check_segments && !all_below(r.segment_ids, o.segment->rows)) return false;
  if (o.position == nullptr) return true;
  const std::uint64_t limit = o.max_positions();
  if (!r.position_ids.empty()) return all_below(r.position_ids, limit);
  for (std::uint64_t s = 0; s < r.sequences; ++s) {
    const std::uint64_t tokens = r.sequence_offsets.empty() ? length : r.sequence_offsets[s + 1] - r.sequence_offsets[s];
    const std::uint64_t start = r.start_positions.empty() ? r.start : r.start_positions[s];
    if (tokens != 0 && (start > limit || tokens > limit - start)) return false;
  }
  return true;
}

// Checks every id, segment and position of a request against one output's tables and rules.
// Messages name the output when the model has several.
Status validate_for_output(const EmbedRequest& r, std::uint64_t n, std::uint64_t length, const OutputInfo& o,
                           bool several_outputs) {
  const std::uint64_t vocab = o.vocab_size();
  const bool check_ids = o.rules->out_of_range == OutOfRangeIds::kRefuse;
  const bool check_segments = !r.segment_ids.empty() && o.segment != nullptr;
  const std::uint64_t segments = o.segment ? o.segment->rows : 0;
  const bool has_position = o.position != nullptr;
  const std::uint64_t limit = o.max_positions();
  const std::int64_t padding_id = o.rules->padding_id;
  if (!check_ids && !check_segments && !has_position) return {};
  if (surely_valid(r, length, o, check_ids, check_segments)) return {};
  std::uint64_t nonpad = 0;  // padding-aware positions: non-pad tokens before t in sequence s
  Status valid = for_each_token(r, n, length, [&](std::uint64_t i, std::uint64_t s, std::uint64_t t) -> Status {
    const std::int64_t id = r.ids[i];
    if (check_ids && (id < 0 || static_cast<std::uint64_t>(id) >= vocab)) return out_of_range(s, t, "id", id, vocab, "ids");
    if (check_segments) {
      const std::int64_t segment = r.segment_ids[i];
      if (segment < 0 || static_cast<std::uint64_t>(segment) >= segments) {
        return out_of_range(s, t, "segment", segment, segments, "segment_ids");
      }
    }
    if (has_position) {
      if (!r.position_ids.empty()) {
        const std::int64_t p = r.position_ids[i];
        if (p < 0 || static_cast<std::uint64_t>(p) >= limit) return out_of_range(s, t, "position", p, limit, "position_ids");
      } else {
        const std::uint64_t start = r.start_positions.empty() ? r.start : r.start_positions[s];
        // Sequential positions count every token; padding-aware ones only non-pads (pads use a fixed row).
        if (t == 0) nonpad = 0;
        const bool pad = padding_id >= 0 && id == padding_id;
        const std::uint64_t index = padding_id >= 0 ? nonpad : t;
        if (padding_id >= 0 && !pad) ++nonpad;
        if (!pad && (start >= limit || index >= limit - start)) {
          return Error(ErrorCode::kOutOfRange,
                       "sequence " + std::to_string(s) + ", position " + std::to_string(t) + ": position " +
                           (start > UINT64_MAX - index ? std::string("(overflow)") : std::to_string(start + index)) +
                           " is past the limit of " + std::to_string(limit) + " positions",
                       {.field = r.start_positions.empty() ? "start" : "start_positions", .sequence = s, .position = t});
        }
      }
    }
    return {};
  });
  if (!valid && several_outputs) {
    return Error(valid.error().code(), output_prefix(o, true) + valid.error().message(), valid.error().context());
  }
  return valid;
}

// Calls kernel(args, begin, end) over [0, n) in contiguous chunks of `grain` on the options' arena
// (or the caller's), every chunk seeing `args` as the caller wrote it (TSan is told: oneTBB's
// hand-off is not visible to it).
template <typename Args, typename Kernel>
void run_in_chunks(Args& args, Kernel kernel, std::uint64_t n, std::uint64_t grain, const EmbedderOptions& options) {
  const auto work = [&] {
    EMBEDRT_TSAN_RELEASE(&args);
    tbb::parallel_for(tbb::blocked_range<std::uint64_t>(0, n, grain),
                      [&](const tbb::blocked_range<std::uint64_t>& range) {
                        EMBEDRT_TSAN_ACQUIRE(&args);
                        kernel(args, range.begin(), range.end());
                        EMBEDRT_TSAN_RELEASE(&args);
                      },
                      tbb::simple_partitioner());
    EMBEDRT_TSAN_ACQUIRE(&args);
  };
  if (options.arena != nullptr) {
    options.arena->execute(work);
  } else {
    work();
  }
}

// Whether a request is embedded position-major (KernelArgs::position_major): its sequences are
// uniform and add the same position rows, and its token rows come from the cache or are narrow.
// Measured against token order (bench/ab.py, 1 thread, a 480 MiB LLC, medians of 5 interleaved
// rounds): tables in the LLC, GPT-2 f32 + positions with outputs rotating through 4x the LLC
// 1.15x, int8 1.13x (into one buffer 1.11x), bf16 -> bf16 1.04x, BERT + LN 1.18x; tables 4x the
// LLC, int8 dim 768 (832-byte rows) 1.15x and f32 dim 256 1.15x, but position-major f32 768 with
// outputs rotating ran 0.86x and bf16 768 -> bf16 0.97-0.99x, so wider rows from memory keep token
// order. Tiles of a few positions per sequence did no better on either side (see 71a2108).
constexpr std::uint64_t kPositionMajorRowBytes = 1024;

bool embeds_position_major(const kernels::KernelArgs& a) {
  const bool shared_positions = a.position != nullptr && a.position_ids.data == nullptr && a.offsets == nullptr &&
                                a.starts == nullptr && a.padding_id < 0 && a.sequences > 1 && a.length > 1;
  return shared_positions && (!a.token_rows_from_memory || a.row_bytes <= kPositionMajorRowBytes);
}

}  // namespace

bool streams_output(NonTemporal mode, std::uint64_t output_bytes, std::uint64_t llc_bytes) noexcept {
  switch (mode) {
    case NonTemporal::kAlways: return true;
    case NonTemporal::kNever: return false;
    // Measured (8113351) with BM_EmbedThenRead, since removed from bench/kernel_bench.cpp (embed,
    // then a consumer reads the output), on a 32 MiB-L3 Zen 4: regular stores win up to ~6 MiB of
    // output (the consumer finds it in cache), the two tie around 12-24 MiB, streaming wins from
    // ~half the LLC up. On the 480 MiB-LLC Xeon (2 threads, GPT-2's 24 MiB calls, bench/ab.py)
    // streaming alone, without the read after, ran 1.06x (f32) and 0.94x (int8) into one buffer,
    // but 1.88x and 1.89x into outputs rotating through 4x the LLC, whose every line is cold: a
    // caller that hands each call a cold buffer past the LLC gains `always` there.
    case NonTemporal::kAuto: break;
  }
  return output_bytes > llc_bytes / 2;
}

namespace {

// Runs one output's kernel over tokens [0, n): on the calling thread for small outputs, else in
// chunks on a oneTBB arena.
void run_kernel(kernels::KernelArgs& a, std::uint64_t n, OutputDType out_dtype, DType table_dtype,
                const EmbedderOptions& options_, Isa isa_, std::uint64_t llc_bytes_, PrefetchLevel level) {
  const std::uint64_t out_bytes = n * a.dim * output_element_bytes(out_dtype);
  a.nontemporal = streams_output(options_.nontemporal, out_bytes, llc_bytes_);
  const kernels::RangeKernel kernel = kernels_for(isa_, level == PrefetchLevel::kL2).get(table_dtype, out_dtype);
  a.steps = n;
  if (out_bytes <= options_.inline_bytes) {
    kernel(a, 0, n);  // small requests: no task overhead
    return;
  }
  // Contiguous chunks of about 128 KiB of output: large enough to amortize a task, small enough
  // to balance the load and to keep a chunk's rows within L2 while they are written.
  const std::uint64_t row_out = out_bytes / n;
  const std::uint64_t grain = std::max<std::uint64_t>(1, (128u << 10) / row_out);
  run_in_chunks(a, kernel, n, grain, options_);
}

}  // namespace

Status Embedder::embed(const EmbedRequest& r, std::span<const OutputTarget> targets) const {
  const std::uint64_t n = r.ids.size();
  const auto outputs = model_.outputs();
  const bool several_outputs = outputs.size() > 1;

  // The outputs asked for: known, each once, each span the request's size in a valid dtype.
  for (std::size_t k = 0; k < targets.size(); ++k) {
    const OutputTarget& target = targets[k];
    if (target.output >= outputs.size()) {
      return request_error(ErrorCode::kInvalidArgument, "output index " + std::to_string(target.output) +
                                                            " is past the model's " + std::to_string(outputs.size()) +
                                                            " outputs", "output");
    }
    for (std::size_t other = 0; other < k; ++other) {
      if (targets[other].output == target.output) {
        return request_error(ErrorCode::kInvalidArgument,
                             "output '" + outputs[target.output].name + "' is asked for twice", "output");
      }
    }
    const OutputSpan& out = target.span;
    if (output_element_bytes(out.dtype()) == 0) {
      return Error(ErrorCode::kInvalidArgument, "output dtype value " + std::to_string(static_cast<int>(out.dtype())) +
                                                    " is not f32, bf16 or f16", {.field = "output"});
    }
    const OutputInfo& o = outputs[target.output];
    const std::uint64_t dim = o.dim();
    // n * dim, multiplied rather than out.size() divided (a 64-bit divide was ~3% of a decode call).
    if (detail::checked_mul(n, dim) != out.size()) {
      return request_error(ErrorCode::kInvalidArgument,
                           output_prefix(o, several_outputs) + "output has " + std::to_string(out.size()) +
                               " elements, expected " + std::to_string(n) + " ids x dim " + std::to_string(dim),
                           "output");
    }
  }

  // Shape of the request.
  std::uint64_t length = 0;
  if (!r.sequence_offsets.empty()) {
    if (r.sequence_offsets.size() != r.sequences + 1 || r.sequence_offsets[0] != 0 ||
        r.sequence_offsets[r.sequences] != n) {
      return request_error(ErrorCode::kInvalidArgument,
                           "sequence_offsets must hold sequences + 1 = " + std::to_string(r.sequences + 1) +
                               " values from 0 to " + std::to_string(n) + " ids", "sequence_offsets");
    }
    for (std::uint64_t s = 0; s < r.sequences; ++s) {
      if (r.sequence_offsets[s + 1] < r.sequence_offsets[s]) {
        return request_error(ErrorCode::kInvalidArgument, "sequence_offsets decrease at sequence " + std::to_string(s),
                             "sequence_offsets");
      }
    }
  } else if (n > 0) {
    if (r.sequences == 0 || n % r.sequences != 0) {
      return request_error(ErrorCode::kInvalidArgument, std::to_string(n) + " ids cannot be split into " +
                                                            std::to_string(r.sequences) + " sequences of equal length", "ids");
    }
    length = n / r.sequences;
  }
  if (n == 0 || targets.empty()) return {};
  // A mapping that lost pages to a truncation is never read from again (embedrt/fault_guard.hpp).
  if (model_.file().lost_pages() != 0) return model_.file().damaged_error();
  if (!r.start_positions.empty() && r.start_positions.size() != r.sequences) {
    return request_error(ErrorCode::kInvalidArgument, std::to_string(r.start_positions.size()) + " start positions for " +
                                                          std::to_string(r.sequences) + " sequences", "start_positions");
  }
  if (!r.position_ids.empty() && r.position_ids.size() != n) {
    return request_error(ErrorCode::kInvalidArgument,
                         std::to_string(r.position_ids.size()) + " position ids for " + std::to_string(n) + " ids", "position_ids");
  }
  if (!r.segment_ids.empty()) {
    const bool any_segment_table = std::any_of(targets.begin(), targets.end(),
                                               [&](const OutputTarget& t) { return outputs[t.output].segment != nullptr; });
    if (!any_segment_table) {
      return request_error(ErrorCode::kInvalidArgument,
                           std::string(targets.size() > 1 ? "segment ids given, but no output asked for has a segment table"
                                                          : "segment ids given, but the model has no segment table"),
                           "segment_ids");
    }
    if (r.segment_ids.size() != n) {
      return request_error(ErrorCode::kInvalidArgument,
                           std::to_string(r.segment_ids.size()) + " segment ids for " + std::to_string(n) + " ids", "segment_ids");
    }
  }

  // Every id, segment and position, for every output asked for, before anything is written.
  for (const OutputTarget& target : targets) {
    const OutputInfo& o = outputs[target.output];
    if (Status s = validate_for_output(r, n, length, o, several_outputs); !s) return s;
    if (Status s = check_mapped_rows(o, r.ids, model_.file().path(), several_outputs); !s) return s;
  }

  for (const OutputTarget& target : targets) {
    const OutputInfo& o = outputs[target.output];
    // The kernel's view of the request for this output.
    kernels::KernelArgs a;
    a.token = o.token->bytes.data();
    a.token_stride = o.token->row_stride;
    if (o.rules->out_of_range == OutOfRangeIds::kRowZero) a.zero_outside_rows = o.vocab_size();
    if (o.id_map != nullptr) a.id_map = o.id_map->bytes.data();
    if (const TableView* s = o.segment) {
      a.segment = s->bytes.data();
      a.segment_stride = s->row_stride;
    }
    if (const TableView* p = o.position) {
      a.position = p->bytes.data();
      a.position_stride = p->row_stride;
    }
    if (const TableView* w = o.norm_weight) a.norm_weight = reinterpret_cast<const float*>(w->bytes.data());
    if (const TableView* b = o.norm_bias) a.norm_bias = reinterpret_cast<const float*>(b->bytes.data());
    a.dim = o.dim();
    a.params_offset = row_params_offset(o.token->dtype, a.dim);
    a.row_bytes = row_bytes(o.token->dtype, a.dim);
    a.token_scale = static_cast<float>(o.rules->token_scale);
    a.scale = static_cast<float>(o.rules->output_scale);
    a.epsilon = static_cast<float>(o.rules->norm_epsilon);
    a.ids = raw(r.ids);
    a.segment_ids = o.segment ? raw(r.segment_ids) : kernels::RawIds{};
    a.position_ids = raw(r.position_ids);
    a.offsets = r.sequence_offsets.empty() ? nullptr : r.sequence_offsets.data();
    a.sequences = r.sequences;
    a.length = length;
    a.starts = r.start_positions.empty() ? nullptr : r.start_positions.data();
    a.start = r.start;
    a.position_offset = o.rules->position_offset;
    a.padding_id = o.rules->padding_id;
    a.out = target.span.data();
    a.token_rows_from_memory = token_rows_from_memory(o.token->bytes.size(), llc_bytes_);
    a.min_rows_ahead = min_rows_ahead_[target.output];
    a.position_major = embeds_position_major(a);
    run_kernel(a, n, target.span.dtype(), o.token->dtype, options_, isa_, llc_bytes_, prefetch_level(target.output));
  }

  // Pages lost while the kernels read (the file truncated meanwhile) were read as zeros: the
  // output is wrong, say so.
  if (model_.file().lost_pages() != 0) return model_.file().damaged_error();
  return {};
}

Status Embedder::pool(const BagRequest& r, OutputSpan out, std::size_t output) const {
  const auto outputs = model_.outputs();
  if (output >= outputs.size()) {
    return request_error(ErrorCode::kInvalidArgument, "output index " + std::to_string(output) + " is past the model's " +
                                                          std::to_string(outputs.size()) + " outputs", "output");
  }
  const OutputInfo& o = outputs[output];
  const bool several_outputs = outputs.size() > 1;
  if (o.position != nullptr || o.segment != nullptr || o.norm_weight != nullptr) {
    return Error(ErrorCode::kUnsupported, output_prefix(o, several_outputs) + "pooling applies to a token table alone; this output adds " +
                                              (o.position ? "positions" : o.segment ? "segments" : "a LayerNorm") +
                                              " to each token", {.field = "output"});
  }
  const PoolingMode mode = r.mode.value_or(o.rules->pooling);
  if (mode == PoolingMode::kNone) {
    return request_error(ErrorCode::kInvalidArgument,
                         output_prefix(o, several_outputs) + "no pooling `mode` was given and the model sets none (pooling.mode)", "mode");
  }
  if (mode == PoolingMode::kMax && (!r.weights.empty() || o.pooling_weights != nullptr)) {
    return request_error(ErrorCode::kInvalidArgument, output_prefix(o, several_outputs) + "weights pool with mode sum or mean, not max", "weights");
  }
  if (output_element_bytes(out.dtype()) == 0) {
    return Error(ErrorCode::kInvalidArgument, "output dtype value " + std::to_string(static_cast<int>(out.dtype())) +
                                                  " is not f32, bf16 or f16", {.field = "output"});
  }
  const std::uint64_t n = r.ids.size();
  std::uint64_t bags = r.bags, length = 0;
  if (!r.offsets.empty()) {
    bags = r.offsets.size() - 1;
    if (r.offsets[0] != 0 || r.offsets[bags] != n) {
      return request_error(ErrorCode::kInvalidArgument, "offsets must hold bags + 1 values from 0 to " + std::to_string(n) +
                                                            " ids", "offsets");
    }
    for (std::uint64_t b = 0; b < bags; ++b) {
      if (r.offsets[b + 1] < r.offsets[b]) {
        return request_error(ErrorCode::kInvalidArgument, "offsets decrease at bag " + std::to_string(b), "offsets");
      }
    }
  } else if (bags == 0 ? n != 0 : n % bags != 0) {
    return request_error(ErrorCode::kInvalidArgument, std::to_string(n) + " ids cannot be split into " +
                                                          std::to_string(bags) + " bags of equal size", "ids");
  } else if (bags != 0) {
    length = n / bags;
  }
  const std::uint64_t dim = o.dim();
  if (detail::checked_mul(bags, dim) != out.size()) {
    return request_error(ErrorCode::kInvalidArgument,
                         output_prefix(o, several_outputs) + "output has " + std::to_string(out.size()) +
                             " elements, expected " + std::to_string(bags) + " bags x dim " + std::to_string(dim),
                         "output");
  }
  if (!r.weights.empty() && r.weights.size() != n) {
    return request_error(ErrorCode::kInvalidArgument, std::to_string(r.weights.size()) + " weights for " + std::to_string(n) +
                                                          " ids", "weights");
  }
  if (bags == 0) return {};
  if (model_.file().lost_pages() != 0) return model_.file().damaged_error();
  // One vectorized pass over the ids first; the bag-by-bag loop (a division per id) only names
  // the offender when there is one.
  if (o.rules->out_of_range == OutOfRangeIds::kRefuse && !all_below(r.ids, o.vocab_size())) {
    const std::uint64_t vocab = o.vocab_size();
    std::uint64_t b = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      if (length != 0) {
        b = i / length;
      } else {
        while (r.offsets[b + 1] <= i) ++b;
      }
      const std::int64_t id = r.ids[i];
      if (id < 0 || static_cast<std::uint64_t>(id) >= vocab) {
        const std::uint64_t first = length != 0 ? b * length : r.offsets[b];
        Error e = out_of_range(b, i - first, "id", id, vocab, "ids", "bag");
        return Error(e.code(), output_prefix(o, several_outputs) + e.message(), e.context());
      }
    }
  }

  if (Status s = check_mapped_rows(o, r.ids, model_.file().path(), several_outputs); !s) return s;

  kernels::PoolArgs a;
  a.token = o.token->bytes.data();
  a.token_stride = o.token->row_stride;
  if (o.rules->out_of_range == OutOfRangeIds::kRowZero) a.zero_outside_rows = o.vocab_size();
  if (o.id_map != nullptr) a.id_map = o.id_map->bytes.data();
  a.dim = dim;
  a.params_offset = row_params_offset(o.token->dtype, dim);
  a.row_bytes = row_bytes(o.token->dtype, dim);
  a.token_scale = static_cast<float>(o.rules->token_scale);
  a.output_scale = static_cast<float>(o.rules->output_scale);
  a.ids = raw(r.ids);
  a.offsets = r.offsets.empty() ? nullptr : r.offsets.data();
  a.length = length;
  a.weights = r.weights.empty() ? nullptr : r.weights.data();
  if (a.weights == nullptr && o.pooling_weights != nullptr) {
    a.id_weights = reinterpret_cast<const float*>(o.pooling_weights->bytes.data());
  }
  a.mode = mode;
  a.normalize = r.normalize.value_or(o.rules->normalize);
  a.bags = bags;
  a.out = out.data();
  a.nontemporal = streams_output(options_.nontemporal, out.size() * output_element_bytes(out.dtype()), llc_bytes_);
  a.token_rows_from_memory = token_rows_from_memory(o.token->bytes.size(), llc_bytes_);
  a.min_rows_ahead = min_rows_ahead_[output];
  const bool into_l2 = prefetch_level(output) == PrefetchLevel::kL2;
  const kernels::BagKernel kernel = kernels_for(isa_, into_l2).get_bag(o.token->dtype, out.dtype());
  // Work is reading rows: run small requests inline, larger ones in chunks of about 128 KiB of rows.
  const std::uint64_t row_read = row_bytes(o.token->dtype, dim);
  const std::uint64_t read_bytes = n * row_read;
  if (read_bytes <= options_.inline_bytes) {
    kernel(a, 0, bags);
  } else {
    const std::uint64_t ids_per_bag = std::max<std::uint64_t>(1, n / bags);
    const std::uint64_t grain = std::max<std::uint64_t>(1, (128u << 10) / row_read / ids_per_bag);
    run_in_chunks(a, kernel, bags, grain, options_);
  }
  if (model_.file().lost_pages() != 0) return model_.file().damaged_error();
  return {};
}

Status Embedder::prefetch(IdSpan ids, std::span<const std::size_t> wanted, PrefetchTarget target) const {
  const auto outputs = model_.outputs();
  for (std::size_t index : wanted) {
    if (index >= outputs.size()) {
      return request_error(ErrorCode::kInvalidArgument, "output index " + std::to_string(index) + " is past the model's " +
                                                            std::to_string(outputs.size()) + " outputs", "output");
    }
  }
  const auto bring = [&](const OutputInfo& o) {
    const std::uint64_t bytes = row_bytes(o.token->dtype, o.token->dim);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      std::int64_t id = ids[i];
      if (id < 0 || static_cast<std::uint64_t>(id) >= o.vocab_size()) {
        if (o.rules->out_of_range != OutOfRangeIds::kRowZero) continue;
        id = 0;
      }
      const std::int64_t r = o.row_of(static_cast<std::uint64_t>(id));
      if (r < 0 || static_cast<std::uint64_t>(r) >= o.token->rows) continue;
      const std::byte* row = o.token->row(static_cast<std::uint64_t>(r));
      if (target == PrefetchTarget::kMemory) advise_will_need(row, bytes);
      for (std::uint64_t k = 0; k < bytes; k += 64) __builtin_prefetch(row + k, 0, 3);
    }
  };
  if (wanted.empty()) {
    for (const OutputInfo& o : outputs) bring(o);
  } else {
    for (std::size_t index : wanted) bring(outputs[index]);
  }
  return {};
}

}  // namespace embedrt
