// `embedrt bench`: throughput and latency of the kernels on a user's own model or a generated one,
// the case's honest roofline, cold single-token decode beside its physical limit, and what the
// model's residency costs (open time, first request, memory, huge pages). Every report states the
// table and output sizes against the last-level cache, so a cache-resident figure is never
// mistaken for a memory-bound one.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <oneapi/tbb/task_arena.h>
#include <random>
#include <string>
#include <vector>

#include "commands.hpp"
#include "embedrt/embedder.hpp"
#include "machine.hpp"
#include "roofline.hpp"
#include "roofline_kernels.hpp"
#include "synthetic_model.hpp"
#include "text_format.hpp"

namespace embedrt::cli {
namespace {

using clock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

// Tokens per call at most (batch x seq), and the memory a run may allocate for ids and output:
// past these, a typo in --batch would otherwise end in bad_alloc.
constexpr std::uint64_t kMaxTokens = std::uint64_t{1} << 26;
constexpr std::uint64_t kMaxBenchBytes = std::uint64_t{16} << 30;

struct BenchArgs {
  std::string model;
  std::string synthetic;  // VOCABxDIM
  std::string dtype = "f32";
  std::uint64_t positions = 0, segments = 0;
  bool layer_norm = false;
  double token_scale = 1.0;
  std::string synthetic_file;
  std::uint64_t batch = 8, seq = 1024;
  int threads = 0;  // 0: every core
  std::string out_dtype = "f32";
  std::string isa;
  double seconds = 2.0;
  bool json = false;
  std::string nontemporal = "auto";
  bool roofline = false;
  bool evict = false;
  bool cold_file = false;
  std::uint64_t id_sets = 8;
  std::uint64_t out_sets = 1;
  // Throughput is measured in the steady state: every page mapped at open, none faulted during
  // the timed calls (--residency mmap shows the lazy cost in the first-call figure).
  OpenOptions open{.residency = Residency::kPopulate};
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const auto k = static_cast<std::size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(k, v.size() - 1)];
}

json latency_json(const std::vector<double>& seconds) {
  return {{"p50", percentile(seconds, 50)}, {"p90", percentile(seconds, 90)}, {"p99", percentile(seconds, 99)},
          {"min", percentile(seconds, 0)}};
}

// "75 ns", "12.4 us", "1.83 ms": latencies span six orders of magnitude.
std::string duration(double seconds) {
  char text[32];
  if (seconds < 1e-6) {
    std::snprintf(text, sizeof text, "%.0f ns", seconds * 1e9);
  } else if (seconds < 1e-3) {
    std::snprintf(text, sizeof text, "%.1f us", seconds * 1e6);
  } else {
    std::snprintf(text, sizeof text, "%.2f ms", seconds * 1e3);
  }
  return text;
}

std::string mib(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

// Seconds of CPU time this process has used, on all its threads.
double cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Per call: wall-clock seconds, and CPU seconds of the whole process divided by its threads. On a
// machine shared with other work, a call that outlasts a scheduler time slice waits for the other
// processes' slices too, so long calls look slower than short ones by the machine's load; CPU
// time leaves the waiting out (memory stalls stay in: a stalled core is a busy one), which makes
// it the fairer clock when the machine is busy. Equal to wall time when every thread works
// throughout the call on an idle machine.
struct Samples {
  std::vector<double> wall, cpu;
};

// Times `call` until `seconds` have passed (at least 10 samples), or until it returns false.
// Calls shorter than a few microseconds are timed K at a time (a clock read costs tens of
// nanoseconds); each sample is then the mean of its K calls.
template <typename Call>
Samples measure(double seconds, int threads, std::uint64_t& per_sample, Call&& call) {
  per_sample = 1;
  bool ok = true;
  for (;;) {
    const auto start = clock::now();
    for (std::uint64_t k = 0; k < per_sample; ++k) ok = call() && ok;
    if (!ok || clock::now() - start >= std::chrono::microseconds(20) || per_sample >= (1u << 20)) break;
    per_sample *= 2;
  }
  Samples samples;
  const auto deadline = clock::now() + std::chrono::duration<double>(seconds);
  const double per = static_cast<double>(per_sample);
  while (ok && (samples.wall.size() < 10 || (clock::now() < deadline && samples.wall.size() < 200000))) {
    const double cpu_start = cpu_seconds();
    const auto start = clock::now();
    for (std::uint64_t k = 0; k < per_sample; ++k) ok = call() && ok;
    samples.wall.push_back(std::chrono::duration<double>(clock::now() - start).count() / per);
    samples.cpu.push_back((cpu_seconds() - cpu_start) / per / static_cast<double>(threads));
  }
  return samples;
}

// The sizes a figure depends on, against the last-level cache.
json sizes_json(const perf::CacheInfo& llc, std::uint64_t table_bytes, std::uint64_t out_call, std::uint64_t out_sets) {
  const double cache = static_cast<double>(llc.bytes);
  const std::uint64_t out_total = out_call * out_sets;
  // DRAM-bound: both the table and every output buffer together are well past the cache.
  const char* regime = table_bytes >= 4 * llc.bytes && out_total >= 2 * llc.bytes ? "dram"
                       : table_bytes + out_total <= llc.bytes                         ? "cache"
                                                                                       : "mixed";
  return {{"table_bytes", table_bytes}, {"output_bytes_per_call", out_call}, {"output_bytes_total", out_total},
          {"table_vs_llc", static_cast<double>(table_bytes) / cache}, {"output_vs_llc", static_cast<double>(out_total) / cache},
          {"regime", regime}};
}

json llc_json(const perf::CacheInfo& llc) {
  return {{"bytes", llc.bytes}, {"level", llc.level}, {"shared_by_cpus", llc.shared_by_cpus},
          {"instances", llc.instances}, {"source", llc.source}};
}

std::string sizes_text(const json& sizes, const perf::CacheInfo& llc) {
  char text[256];
  std::snprintf(text, sizeof text, "table %s = %.2fx LLC, output %s = %.2fx LLC (LLC %s): %s",
                mib(sizes["table_bytes"].get<std::uint64_t>()).c_str(), sizes["table_vs_llc"].get<double>(),
                mib(sizes["output_bytes_total"].get<std::uint64_t>()).c_str(), sizes["output_vs_llc"].get<double>(),
                mib(llc.bytes).c_str(), sizes["regime"].get<std::string>().c_str());
  return text;
}

// Drops the file's pages from the page cache (written back first), so the next open reads it
// from disk. Pages another process has mapped stay; a hint, like the kernel's.
void drop_from_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fdatasync(fd);
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

Result<bool> use_nontemporal(const std::string& mode, std::uint64_t out_bytes, std::uint64_t llc) {
  if (mode == "always") return true;
  if (mode == "never") return false;
  if (mode == "auto") return out_bytes > llc / 2;  // the Embedder's own rule (NonTemporal::kAuto)
  return Error(ErrorCode::kInvalidArgument, "--nontemporal '" + mode + "': expected auto, always or never");
}

Result<perf::SyntheticSpec> synthetic_spec(const BenchArgs& args) {
  perf::SyntheticSpec spec;
  if (Status s = perf::parse_shape(args.synthetic, spec); !s) return std::move(s).error();
  const auto dtype = parse_dtype(args.dtype);
  if (!dtype || *dtype == DType::kInt32 || *dtype == DType::kInt4Rowwise) {
    return Error(ErrorCode::kInvalidArgument, "--dtype '" + args.dtype + "': expected f32, f16, bf16 or int8");
  }
  spec.dtype = *dtype;
  spec.positions = args.positions;
  spec.segments = args.segments;
  spec.layer_norm = args.layer_norm;
  spec.token_scale = args.token_scale;
  return spec;
}

// --roofline: the case's sequential stream (perf/roofline.hpp) instead of the gather.
int run_roofline(const BenchArgs& args, DType table, std::uint64_t dim, std::uint64_t stride, OutputDType out,
                 Isa isa, int threads, const perf::CacheInfo& llc) {
  tbb::task_arena arena(threads);
  perf::StreamCase c;
  c.table = table;
  c.out = out;
  c.dim = dim;
  c.stride = stride;
  c.tokens = args.batch * args.seq;
  c.out_sets = args.out_sets;
  c.min_table_bytes = 4 * llc.bytes;
  const std::uint64_t out_call = c.tokens * dim * output_element_bytes(out);
  auto stream = use_nontemporal(args.nontemporal, out_call, llc.bytes);
  if (!stream) return report(stream.error());
  c.stream = *stream;
  perf::StreamRoofline roofline(isa, c);
  for (int i = 0; i < 3; ++i) roofline.call(arena);
  std::uint64_t per_sample = 1;
  const Samples measured = measure(args.seconds, threads, per_sample, [&] {
    roofline.call(arena);
    return true;
  });
  const auto& seconds = measured.wall;
  const double median = percentile(seconds, 50);
  const double tokens_per_second = static_cast<double>(c.tokens) / median;
  const double gbps = tokens_per_second * static_cast<double>(roofline.bytes_per_token()) / 1e9;
  const json sizes = sizes_json(llc, roofline.table_bytes(), roofline.output_bytes(), c.out_sets);
  if (args.json) {
    const json doc = {{"mode", "roofline"}, {"isa", isa_name(isa)}, {"threads", threads},
                      {"table_dtype", dtype_name(table)}, {"out_dtype", output_dtype_name(out)}, {"dim", dim},
                      {"row_stride", c.stride}, {"tokens_per_call", c.tokens}, {"nontemporal", c.stream},
                      {"llc", llc_json(llc)}, {"sizes", sizes}, {"samples", seconds.size()},
                      {"tokens_per_second", tokens_per_second}, {"gb_per_second", gbps},
                      {"latency_seconds", latency_json(seconds)},
                      {"cpu_tokens_per_second", static_cast<double>(c.tokens) / percentile(measured.cpu, 50)},
                      {"latency_cpu_seconds", latency_json(measured.cpu)}};
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    std::printf("roofline: %s rows (stride %llu) streamed to %s, dim %llu, isa %s, %d threads, %llu rows per call\n",
                std::string(dtype_name(table)).c_str(), static_cast<unsigned long long>(c.stride),
                std::string(output_dtype_name(out)).c_str(), static_cast<unsigned long long>(dim),
                std::string(isa_name(isa)).c_str(), threads, static_cast<unsigned long long>(c.tokens));
    std::printf("  %s\n", sizes_text(sizes, llc).c_str());
    std::printf("  %.3f M tokens/s, %.2f GB/s (table rows read + output written)\n", tokens_per_second / 1e6, gbps);
  }
  return kExitOk;
}

// --evict: single-token decode with the token row and the output evicted from every cache before
// each call, interleaved with the physical limit of the same row (perf/roofline_kernels.hpp:
// every line of the row prefetched at once, then the add).
int run_cold_decode(const BenchArgs& args, const Model& model, const Embedder& embedder,
                    const std::vector<std::vector<std::int64_t>>& ids, OutputSpan out, json doc) {
  const TableView& token = model.token();
  const std::uint64_t row = row_bytes(token.dtype, model.dim());
  const std::uint64_t out_bytes = out.size() * output_element_bytes(out.dtype());
  const perf::DecodeLimit limit = perf::roofline_kernels(embedder.isa()).get_decode(token.dtype, out.dtype());
  const std::byte* position = model.position() ? model.position()->row(model.metadata().position_offset) : nullptr;
  std::vector<double> embedrt_ns, limit_ns, timer_ns;
  EmbedRequest request;
  request.sequences = 1;
  const auto deadline = clock::now() + std::chrono::duration<double>(args.seconds);
  for (std::uint64_t k = 0; embedrt_ns.size() < 1000 || (clock::now() < deadline && embedrt_ns.size() < 1000000); ++k) {
    const std::int64_t id = ids[k % ids.size()][0];
    const std::byte* tok = token.row(static_cast<std::uint64_t>(id));
    request.ids = std::span<const std::int64_t>(&ids[k % ids.size()][0], 1);
    perf::evict(tok, row);
    perf::evict(out.data(), out_bytes);
    auto start = clock::now();
    const Status s = embedder.embed(request, out);
    embedrt_ns.push_back(std::chrono::duration<double, std::nano>(clock::now() - start).count());
    if (!s) return report(s.error());
    perf::evict(tok, row);
    perf::evict(out.data(), out_bytes);
    start = clock::now();
    limit({tok, position, row, model.dim(), int8_params_offset(model.dim()), static_cast<std::byte*>(out.data())});
    limit_ns.push_back(std::chrono::duration<double, std::nano>(clock::now() - start).count());
    start = clock::now();
    timer_ns.push_back(std::chrono::duration<double, std::nano>(clock::now() - start).count());
  }
  const double e = percentile(embedrt_ns, 50), l = percentile(limit_ns, 50), t = percentile(timer_ns, 50);
  if (args.json) {
    doc["mode"] = "decode_cold";
    doc["samples"] = embedrt_ns.size();
    const auto ns = [](const std::vector<double>& v) {
      return json{{"p50", percentile(v, 50)}, {"p90", percentile(v, 90)}, {"p99", percentile(v, 99)}, {"min", percentile(v, 0)}};
    };
    doc["embedrt_ns"] = ns(embedrt_ns);
    doc["limit_ns"] = ns(limit_ns);
    doc["timer_ns"] = ns(timer_ns);
    doc["ratio_to_limit"] = e / l;
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    std::printf("cold decode (row and output evicted before each call), %zu calls each, interleaved:\n", embedrt_ns.size());
    std::printf("  embedrt p50 %.0f ns (p90 %.0f, p99 %.0f)\n", e, percentile(embedrt_ns, 90), percentile(embedrt_ns, 99));
    std::printf("  limit   p50 %.0f ns (p90 %.0f, p99 %.0f): the row's lines prefetched at once, then the add\n", l,
                percentile(limit_ns, 90), percentile(limit_ns, 99));
    std::printf("  embedrt / limit: %.2fx (timer overhead %.0f ns, included in both)\n", e / l, t);
  }
  return kExitOk;
}

int run(const BenchArgs& args) {
  const auto parsed = parse_output_dtype(args.out_dtype);
  if (!parsed) {
    return report(Error(ErrorCode::kInvalidArgument, "--out-dtype '" + args.out_dtype + "': expected f32, bf16 or f16"));
  }
  const OutputDType dtype = *parsed;
  if (args.batch == 0 || args.seq == 0) return report(Error(ErrorCode::kInvalidArgument, "--batch and --seq must be at least 1"));
  if (args.model.empty() == args.synthetic.empty()) {
    return report(Error(ErrorCode::kInvalidArgument, "give a MODEL or --synthetic VOCABxDIM (one of them)"));
  }
  const std::uint64_t tokens = args.batch * args.seq;  // each <= 2^26 (checked options): no overflow
  if (args.evict && tokens != 1) {
    return report(Error(ErrorCode::kInvalidArgument, "--evict measures single-token decode: give --batch 1 --seq 1"));
  }
  const int threads = args.threads > 0 ? args.threads : tbb::this_task_arena::max_concurrency();
  const perf::CacheInfo llc = perf::last_level_cache();
  std::optional<Isa> forced;
  if (!args.isa.empty()) {
    forced = parse_isa(args.isa);
    if (!forced) return report(Error(ErrorCode::kInvalidArgument, "--isa '" + args.isa + "' is not an ISA name"));
  }
  std::optional<perf::SyntheticSpec> spec;
  if (!args.synthetic.empty()) {
    auto s = synthetic_spec(args);
    if (!s) return report(s.error());
    spec = *s;
  }

  // The roofline needs the case's dtypes and widths only: no model is opened or written.
  if (args.roofline) {
    DType table = spec ? spec->dtype : DType::kF32;
    std::uint64_t dim = spec ? spec->dim : 0, stride = spec ? default_row_stride(spec->dtype, spec->dim) : 0;
    if (!spec) {
      auto file = TableFile::open(args.model);  // O(1): the header
      if (!file) return report(file.error());
      const TableView* tok = file->find(Role::kToken);
      if (tok == nullptr) return report(Error(ErrorCode::kNotFound, "'" + args.model + "': no token table"));
      table = tok->dtype;
      dim = tok->dim;
      stride = tok->row_stride;
    }
    Isa isa = Isa::kScalar;
    if (forced) {
      isa = *forced;
    } else {
      auto chosen = default_isa();
      if (!chosen) return report(chosen.error());
      isa = *chosen;
    }
    if (!isa_supported(isa)) return report(Error(ErrorCode::kUnsupported, "ISA " + args.isa + " is not supported by this CPU"));
    return run_roofline(args, table, dim, stride, dtype, isa, threads, llc);
  }

  // The model: the user's, or one generated now (kept in --synthetic-file, or a temporary removed
  // once open: the mapping or copy keeps what it needs).
  std::string path = args.model;
  bool temporary = false;
  if (spec) {
    path = args.synthetic_file;
    if (path.empty()) {
      path = (std::filesystem::temp_directory_path() / ("embedrt-bench-" + std::to_string(::getpid()) + ".embt")).string();
      temporary = true;
    }
    std::error_code ec;
    if (temporary || !std::filesystem::exists(path, ec)) {
      if (Status s = perf::write_synthetic_model(path, *spec); !s) return report(s.error());
    }
  }
  if (args.cold_file) drop_from_page_cache(path);
  const auto open_start = clock::now();
  auto model = Model::open(path, args.open);
  const double open_seconds = std::chrono::duration<double>(clock::now() - open_start).count();
  if (temporary) std::filesystem::remove(path);
  if (!model) return report(model.error());
  if (spec) {
    if (Status s = perf::matches(*model, *spec); !s) return report(s.error());
  }
  if (args.seq > model->max_positions()) {
    return report(Error(ErrorCode::kInvalidArgument, "--seq " + std::to_string(args.seq) + " is longer than the model's " +
                                                         std::to_string(model->max_positions()) + " positions"));
  }
  tbb::task_arena arena(threads);
  EmbedderOptions options;
  options.arena = &arena;
  if (args.nontemporal == "always") {
    options.nontemporal = NonTemporal::kAlways;
  } else if (args.nontemporal == "never") {
    options.nontemporal = NonTemporal::kNever;
  } else if (args.nontemporal != "auto") {
    return report(Error(ErrorCode::kInvalidArgument, "--nontemporal '" + args.nontemporal + "': expected auto, always or never"));
  }
  options.isa = forced;
  auto embedder = Embedder::create(*model, options);
  if (!embedder) return report(embedder.error());

  const std::uint64_t dim = model->dim();
  const std::uint64_t sets = std::max<std::uint64_t>(1, args.id_sets);
  const std::uint64_t out_sets = std::max<std::uint64_t>(1, args.out_sets);
  const std::uint64_t out_call = tokens * dim * output_element_bytes(dtype);
  std::uint64_t ids_bytes = 0, needed = 0;
  if (tokens > kMaxTokens || __builtin_mul_overflow(tokens, 8 * sets, &ids_bytes) ||
      __builtin_mul_overflow(out_call, out_sets, &needed) || __builtin_add_overflow(needed, ids_bytes, &needed) ||
      needed > kMaxBenchBytes) {
    return report(Error(ErrorCode::kInvalidArgument,
                        "--batch " + std::to_string(args.batch) + " x --seq " + std::to_string(args.seq) + " x --id-sets / --out-sets" +
                            " is past the bench's limit of " + std::to_string(kMaxTokens) + " tokens per call and " +
                            std::to_string(kMaxBenchBytes >> 30) + " GiB of ids and output"));
  }
  // Calls rotate through several random id batches, so that (for large batches) the rows touched
  // across calls exceed the last-level cache and the figure is a memory-bound one, not a cached
  // one; and through --out-sets output buffers, for the same reason on the output side.
  std::vector<std::vector<std::int64_t>> id_batches(sets, std::vector<std::int64_t>(tokens));
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<std::int64_t> pick(0, static_cast<std::int64_t>(model->vocab_size()) - 1);
  for (auto& batch : id_batches) {
    for (auto& id : batch) id = pick(rng);
  }
  // Output buffers are cache-line aligned, as a server's buffers should be: a row start that is
  // not lets streaming stores share a line with the scalar head (see the kernel's peeling).
  std::vector<std::vector<std::byte>> storage(out_sets);
  std::vector<OutputSpan> outs;
  for (auto& buffer : storage) {
    buffer.resize(out_call + 64);  // zero-filled: first-touch faults happen here, not in a call
    std::byte* aligned = buffer.data() + (64 - reinterpret_cast<std::uintptr_t>(buffer.data()) % 64) % 64;
    auto span = OutputSpan::from_bytes({aligned, out_call}, dtype);
    if (!span) return report(span.error());
    outs.push_back(*span);
  }
  std::vector<EmbedRequest> requests(sets);
  for (std::uint64_t k = 0; k < sets; ++k) {
    requests[k].ids = id_batches[k];
    requests[k].sequences = args.batch;
  }

  const TableView& token = model->token();
  const json sizes = sizes_json(llc, token.bytes.size(), out_call, out_sets);
  json doc = {{"mode", "gather"}, {"model", spec ? "synthetic " + spec->describe() : args.model},
              {"isa", isa_name(embedder->isa())}, {"threads", threads},
              {"table_dtype", dtype_name(token.dtype)}, {"out_dtype", args.out_dtype},
              {"batch", args.batch}, {"seq", args.seq}, {"dim", dim}, {"vocab", model->vocab_size()},
              {"id_sets", sets}, {"out_sets", out_sets}, {"llc", llc_json(llc)}, {"sizes", sizes}};

  // The first call after open: what a server's first request pays for the residency chosen.
  const auto first_start = clock::now();
  if (Status s = embedder->embed(requests[0], outs[0]); !s) return report(s.error());
  const double first_seconds = std::chrono::duration<double>(clock::now() - first_start).count();
  const auto table_memory = perf::range_memory(token.bytes.data(), token.bytes.size());
  doc["residency"] = {{"mode", residency_name(args.open.residency)}, {"locked", args.open.lock_in_memory},
                      {"cold_file", args.cold_file}, {"open_seconds", open_seconds},
                      {"first_call_seconds", first_seconds}, {"thp", perf::transparent_hugepage_mode()},
                      {"table_rss", table_memory.rss}, {"table_anon_huge", table_memory.anon_huge},
                      {"table_file_pmd", table_memory.file_pmd}};

  if (args.evict) return run_cold_decode(args, *model, *embedder, id_batches, outs[0], doc);

  std::uint64_t call = 0;
  Status failed;
  const auto next = [&] {
    const Status s = embedder->embed(requests[call % sets], outs[call % out_sets]);
    ++call;
    if (!s) failed = s;
    return s.ok();
  };
  for (int i = 0; i < 3; ++i) next();  // warm-up: thread start-up, the rows of the first calls
  std::uint64_t per_sample = 1;
  const Samples measured = measure(args.seconds, threads, per_sample, next);
  const auto& seconds = measured.wall;
  if (!failed) return report(failed.error());
  const auto process = perf::process_memory();
  doc["residency"]["process_rss"] = process.rss;
  doc["residency"]["process_pss"] = process.pss;
  doc["residency"]["process_anon_huge"] = process.anon_huge;
  const double median = percentile(seconds, 50);
  const double bytes_per_token = static_cast<double>(row_bytes(token.dtype, dim) + dim * output_element_bytes(dtype));
  const double tokens_per_second = static_cast<double>(tokens) / median;
  const double gbps = tokens_per_second * bytes_per_token / 1e9;
  if (args.json) {
    doc["samples"] = seconds.size();
    doc["calls_per_sample"] = per_sample;
    doc["tokens_per_second"] = tokens_per_second;
    doc["gb_per_second"] = gbps;
    doc["latency_seconds"] = latency_json(seconds);
    doc["cpu_tokens_per_second"] = static_cast<double>(tokens) / percentile(measured.cpu, 50);
    doc["latency_cpu_seconds"] = latency_json(measured.cpu);
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    std::printf("%s: %s table, %s output, isa %s, %d threads, batch %llu x %llu (dim %llu), %zu runs\n",
                doc["model"].get<std::string>().c_str(), std::string(dtype_name(token.dtype)).c_str(),
                args.out_dtype.c_str(), std::string(isa_name(embedder->isa())).c_str(), threads,
                static_cast<unsigned long long>(args.batch), static_cast<unsigned long long>(args.seq),
                static_cast<unsigned long long>(dim), seconds.size());
    std::printf("  %s\n", sizes_text(sizes, llc).c_str());
    std::printf("  %.3f M tokens/s, %.2f GB/s (table rows read + output written); %.3f M tokens per CPU second per thread\n",
                tokens_per_second / 1e6, gbps, static_cast<double>(tokens) / percentile(measured.cpu, 50) / 1e6);
    std::printf("  latency p50 %s, p90 %s, p99 %s, min %s\n", duration(median).c_str(),
                duration(percentile(seconds, 90)).c_str(), duration(percentile(seconds, 99)).c_str(),
                duration(percentile(seconds, 0)).c_str());
    std::printf("  residency %s: open %s, first call %s; table resident %s (%s in huge pages; THP %s)\n",
                std::string(residency_name(args.open.residency)).c_str(), duration(open_seconds).c_str(),
                duration(first_seconds).c_str(), mib(table_memory.rss).c_str(),
                mib(table_memory.anon_huge + table_memory.file_pmd).c_str(), perf::transparent_hugepage_mode().c_str());
  }
  return kExitOk;
}

}  // namespace

Runner add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Measure tokens/s, GB/s and latency on a model, beside its roofline");
  auto args = std::make_shared<BenchArgs>();
  cmd->add_option("MODEL", args->model, "the .embt model (or --synthetic)");
  cmd->add_option("--synthetic", args->synthetic,
                  "generate a model of this shape instead (VOCABxDIM, e.g. 262144x5376); see --dtype, --positions, "
                  "--segments, --layer-norm, --synthetic-file");
  cmd->add_option("--dtype", args->dtype, "--synthetic's table dtype: f32, f16, bf16 or int8 (default f32)");
  cmd->add_option("--positions", args->positions, "--synthetic: learned position rows (default 0: none)")
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 24));
  cmd->add_option("--segments", args->segments, "--synthetic: token type rows (default 0: none)")
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 16));
  cmd->add_flag("--layer-norm", args->layer_norm, "--synthetic: LayerNorm after the sum");
  cmd->add_option("--token-scale", args->token_scale, "--synthetic: multiplies the token row (Gemma: sqrt(hidden))")
      ->check(CLI::Range(-1e6, 1e6));
  cmd->add_option("--synthetic-file", args->synthetic_file,
                  "--synthetic: keep the model in this file, and reuse it when it exists (default: a temporary)");
  cmd->add_option("--batch", args->batch, "sequences per call (default 8)")->check(CLI::Range(std::uint64_t{1}, kMaxTokens));
  cmd->add_option("--seq", args->seq, "tokens per sequence (default 1024)")->check(CLI::Range(std::uint64_t{1}, kMaxTokens));
  cmd->add_option("--threads", args->threads, "threads (default 0: every core)")->check(CLI::Range(0, 1024));
  cmd->add_option("--out-dtype", args->out_dtype, "f32, bf16 or f16");
  cmd->add_option("--isa", args->isa, "force a kernel: scalar, sse4.2, avx2 or avx512");
  cmd->add_option("--seconds", args->seconds, "how long to measure (default 2)")->check(CLI::Range(0.01, 3600.0));
  cmd->add_flag("--json", args->json, "print one JSON object");
  cmd->add_option("--nontemporal", args->nontemporal, "streaming stores: auto (by output size), always or never");
  cmd->add_option("--id-sets", args->id_sets, "random id batches rotated between calls (default 8)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20));
  cmd->add_option("--out-sets", args->out_sets, "output buffers rotated between calls (default 1)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1024}));
  add_open_options(cmd, args->open, true);
  cmd->add_flag("--cold-file", args->cold_file,
                "drop the model file from the page cache before opening it (first request from disk)");
  cmd->add_flag("--roofline", args->roofline,
                "measure the case's roofline instead: its table rows streamed in order to its output dtype, over "
                "buffers 4x the last-level cache");
  cmd->add_flag("--evict", args->evict,
                "cold single-token decode: the row and output evicted (clflush) before each call, beside the "
                "physical limit (the row's lines prefetched at once, then the add)");
  return [args]() { return run(*args); };
}

}  // namespace embedrt::cli
