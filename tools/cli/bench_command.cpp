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
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <oneapi/tbb/task_arena.h>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "embedrt/embedder.hpp"
#include "embedrt/isa.hpp"
#include "id_rotation.hpp"
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
  NonTemporal nontemporal = NonTemporal::kAuto;
  PrefetchLevel prefetch_level = PrefetchLevel::kAuto;
  std::optional<std::uint64_t> min_rows_ahead;  // EmbedderOptions::min_rows_ahead
  bool roofline = false;
  bool evict = false;
  bool cold_file = false;
  std::uint64_t id_sets = 8;
  std::uint64_t out_sets = 1;
  std::string gemma3n;               // --synthetic-gemma3n e2b|e4b
  std::string second_output;         // --synthetic: ROWSxWIDTH of a second output's table
  std::vector<std::string> outputs;  // --output NAME...; empty: every output (a bag: the primary)
  std::uint64_t bag = 0;             // ids per bag; 0: no bags (a gather)
  std::string pooling;               // sum, mean or max; empty: the output's default, else sum
  bool normalize = false;
  bool weights = false;              // --bag: a random weight per id (PyTorch's per_sample_weights)
  double prefetch_ahead_us = -1;     // --evict: also Embedder::prefetch this long before the call; < 0: off
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

// Runs `f` once, appends its wall time in nanoseconds to `into`, and returns what `f` returns
// (the cold decode times several calls of each loop turn apart).
template <typename F>
auto timed_ns(std::vector<double>& into, F&& f) {
  const auto start = clock::now();
  const auto elapsed = [&] { into.push_back(std::chrono::duration<double, std::nano>(clock::now() - start).count()); };
  if constexpr (std::is_void_v<decltype(f())>) {
    f();
    elapsed();
  } else {
    auto result = f();
    elapsed();
    return result;
  }
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
// `touched`: the table bytes the calls read (every row for a roofline, the rows the rotating id
// sets hit for a gather). DRAM-bound needs those rows 3.5x past the cache (a table 4x the LLC,
// fully covered, touches 3.92x) and every output buffer together 2x past it; as compare.py.
json sizes_json(const perf::CacheInfo& llc, std::uint64_t table_bytes, std::uint64_t touched, std::uint64_t out_call,
                std::uint64_t out_sets) {
  const double cache = static_cast<double>(llc.bytes);
  const std::uint64_t out_total = out_call * out_sets;
  const char* regime = static_cast<double>(touched) >= 3.5 * cache && out_total >= 2 * llc.bytes ? "dram"
                       : touched + out_total <= llc.bytes                                       ? "cache"
                                                                                                 : "mixed";
  return {{"table_bytes", table_bytes}, {"touched_bytes", touched}, {"output_bytes_per_call", out_call},
          {"output_bytes_total", out_total}, {"table_vs_llc", static_cast<double>(table_bytes) / cache},
          {"touched_vs_llc", static_cast<double>(touched) / cache},
          {"output_vs_llc", static_cast<double>(out_total) / cache}, {"regime", regime}};
}

json llc_json(const perf::CacheInfo& llc) {
  return {{"bytes", llc.bytes}, {"level", llc.level}, {"shared_by_cpus", llc.shared_by_cpus},
          {"instances", llc.instances}, {"source", llc.source}};
}

std::string sizes_text(const json& sizes, const perf::CacheInfo& llc) {
  char text[256];
  std::snprintf(text, sizeof text, "table %s = %.2fx LLC (rows touched %.2fx), output %s = %.2fx LLC (LLC %s): %s",
                mib(sizes["table_bytes"].get<std::uint64_t>()).c_str(), sizes["table_vs_llc"].get<double>(),
                sizes["touched_vs_llc"].get<double>(),
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

bool model_is_synthetic(const BenchArgs& args) { return !args.synthetic.empty() || !args.gemma3n.empty(); }

Result<perf::SyntheticSpec> synthetic_spec(const BenchArgs& args) {
  perf::SyntheticSpec spec;
  if (!args.gemma3n.empty()) {  // the whole shape is Gemma 3n's: no other --synthetic option applies
    if (Status s = perf::gemma3n_spec(args.gemma3n, spec); !s) return std::move(s).error();
    return spec;
  }
  if (Status s = perf::parse_shape(args.synthetic, spec); !s) return std::move(s).error();
  if (!args.second_output.empty()) {
    perf::SyntheticSpec second;
    if (Status s = perf::parse_shape(args.second_output, second); !s) {
      return Error(ErrorCode::kInvalidArgument, "--second-output '" + args.second_output + "': expected ROWSxWIDTH, e.g. 262144x7680");
    }
    spec.extra.name = "second";
    spec.extra.vocab = second.vocab;
    spec.extra.dim = second.dim;
    spec.extra.out_of_range = OutOfRangeIds::kRowZero;
  }
  const auto dtype = parse_dtype(args.dtype);
  if (!dtype || !is_value_dtype(*dtype)) {
    return Error(ErrorCode::kInvalidArgument, "--dtype '" + args.dtype + "': expected f32, f16, bf16, int8 or int4");
  }
  spec.dtype = *dtype;
  spec.positions = args.positions;
  spec.segments = args.segments;
  spec.layer_norm = args.layer_norm;
  spec.token_scale = args.token_scale;
  return spec;
}

// One output's table as the roofline streams it.
struct StreamTable {
  std::string name;
  DType dtype = DType::kF32;
  std::uint64_t dim = 0, stride = 0;
};

// --roofline: the case's sequential stream (perf/roofline.hpp) instead of the gather: one stream
// per output asked for, one after the other in each call (every output's rows in and out), or,
// with --bag, the rows of each bag pooled into one row.
int run_roofline(const BenchArgs& args, const std::vector<StreamTable>& tables, OutputDType out, Isa isa, int threads,
                 const perf::CacheInfo& llc) {
  tbb::task_arena arena(threads);
  const std::uint64_t tokens = args.batch * args.seq;
  std::vector<std::unique_ptr<perf::StreamRoofline>> streams;
  json outputs = json::array();
  std::uint64_t table_bytes = 0, out_call = 0, bytes_per_call = 0;
  bool nontemporal = false;
  for (const StreamTable& t : tables) {
    perf::StreamCase c;
    c.table = t.dtype;
    c.out = out;
    c.dim = t.dim;
    c.stride = t.stride;
    c.tokens = tokens;
    c.out_sets = args.out_sets;
    c.min_table_bytes = 4 * llc.bytes;
    c.bag = std::max<std::uint64_t>(1, args.bag);
    c.mean = args.pooling == "mean";
    const std::uint64_t out_bytes = tokens / c.bag * t.dim * output_element_bytes(out);
    c.stream = streams_output(args.nontemporal, out_bytes, llc.bytes);  // as the Embedder
    nontemporal = nontemporal || c.stream;
    streams.push_back(std::make_unique<perf::StreamRoofline>(isa, c));
    const perf::StreamRoofline& r = *streams.back();
    table_bytes += r.table_bytes();
    out_call += r.output_bytes();
    bytes_per_call += r.bytes_per_call();
    outputs.push_back({{"name", t.name}, {"table_dtype", dtype_name(t.dtype)}, {"dim", t.dim}, {"row_stride", c.stride},
                       {"bytes_per_call", r.bytes_per_call()}});
  }
  const auto call = [&] {
    for (auto& s : streams) s->call(arena);
  };
  // Each way of streaming the rows in turn, and the fastest kept on each clock, since none is the
  // fastest everywhere and a roofline is the best one can do: with the rows ahead prefetched at
  // each of perf::kPrefetchAheadBytes, into L1 and, where the library has L2 kernels for the ISA,
  // into L2 (as PrefetchLevel::kL2), and for bags of rows wider than the registers each way of
  // pooling them (perf::BagPlan), which share --seconds between them; each prefetch distance and
  // level has that time again (the samples of each way as many as before they were added).
  struct Way {
    perf::BagPlan plan;
    std::uint64_t ahead;
    PrefetchLevel level;
  };
  const bool plans_differ =
      std::any_of(streams.begin(), streams.end(), [](const auto& s) { return s->bag_plans_differ(); });
  const bool l2_ways = perf::has_prefetch_l2_roofline(isa);
  std::vector<Way> ways;
  for (perf::BagPlan plan : perf::kBagPlans) {
    for (std::uint64_t ahead : perf::kPrefetchAheadBytes) {
      ways.push_back({plan, ahead, PrefetchLevel::kL1});
      if (ahead != 0 && l2_ways) ways.push_back({plan, ahead, PrefetchLevel::kL2});  // (no prefetch: one way)
    }
    if (!plans_differ) break;  // (the first plan stands for all)
  }
  const auto way_name = [&](const Way& w) {
    const std::string prefetch =
        w.ahead == 0 ? "no software prefetch"
                     : "prefetched " + std::to_string(w.ahead >> 10) + " KiB ahead" +
                           (w.level == PrefetchLevel::kL2 ? " into L2" : "");
    return plans_differ ? std::string(perf::bag_plan_name(w.plan)) + ", " + prefetch : prefetch;
  };
  Samples measured;                 // the way fastest on the wall clock: its samples are reported
  double best_cpu_median = 0.0;     // the fastest way's on the CPU clock (cpu_tokens_per_second)
  Way best = ways.front();
  json way_rates = json::object(), way_cpu_rates = json::object();
  const double plans_measured = plans_differ ? static_cast<double>(std::size(perf::kBagPlans)) : 1.0;
  for (const Way& way : ways) {
    for (auto& s : streams) {
      s->set_bag_plan(way.plan);
      s->set_prefetch_ahead(way.ahead);
      s->set_prefetch_level(way.level);
    }
    for (int i = 0; i < 3; ++i) call();
    std::uint64_t per_sample = 1;
    Samples samples = measure(args.seconds / plans_measured, threads, per_sample, [&] {
      call();
      return true;
    });
    const double wall = percentile(samples.wall, 50), cpu = percentile(samples.cpu, 50);
    way_rates[way_name(way)] = static_cast<double>(tokens) / wall;
    way_cpu_rates[way_name(way)] = static_cast<double>(tokens) / cpu;
    if (best_cpu_median == 0.0 || cpu < best_cpu_median) best_cpu_median = cpu;
    if (measured.wall.empty() || wall < percentile(measured.wall, 50)) {
      measured = std::move(samples);
      best = way;
    }
  }
  const auto& seconds = measured.wall;
  const double median = percentile(seconds, 50);
  const double tokens_per_second = static_cast<double>(tokens) / median;
  const double bytes_per_token = static_cast<double>(bytes_per_call) / static_cast<double>(tokens);
  const double gbps = tokens_per_second * bytes_per_token / 1e9;
  const json sizes = sizes_json(llc, table_bytes, table_bytes, out_call, args.out_sets);
  const StreamTable& first = tables.front();
  if (args.json) {
    json doc = {{"mode", "roofline"}, {"isa", isa_name(isa)}, {"threads", threads},
                {"table_dtype", dtype_name(first.dtype)}, {"out_dtype", output_dtype_name(out)}, {"dim", first.dim},
                {"row_stride", outputs[0]["row_stride"]}, {"outputs", outputs}, {"tokens_per_call", tokens},
                {"bytes_per_token", bytes_per_token}, {"nontemporal", nontemporal},
                {"llc", llc_json(llc)}, {"sizes", sizes}, {"samples", seconds.size()},
                {"tokens_per_second", tokens_per_second}, {"gb_per_second", gbps},
                {"latency_seconds", latency_json(seconds)},
                {"cpu_tokens_per_second", static_cast<double>(tokens) / best_cpu_median},
                {"latency_cpu_seconds", latency_json(measured.cpu)}};
    // The fastest way on the wall clock (its samples are reported), and every way's rate.
    doc["way"] = way_name(best);
    doc["prefetch_ahead_bytes"] = best.ahead;
    doc["prefetch_ahead_tried"] =
        std::vector<std::uint64_t>(std::begin(perf::kPrefetchAheadBytes), std::end(perf::kPrefetchAheadBytes));
    // where the fastest way's prefetches went ("none": it issued none)
    doc["prefetch_level"] = best.ahead == 0 ? std::string_view("none") : prefetch_level_name(best.level);
    doc["prefetch_levels_tried"] = l2_ways ? json::array({"l1", "l2"}) : json::array({"l1"});
    doc["ways_tokens_per_second"] = way_rates;
    doc["ways_cpu_tokens_per_second"] = way_cpu_rates;
    if (args.bag) {
      doc["bag"] = args.bag;
      doc["pooling"] = args.pooling == "mean" ? "mean" : "sum";
      doc["bags_per_second"] = tokens_per_second / static_cast<double>(args.bag);
      if (plans_differ) doc["bag_plan"] = perf::bag_plan_name(best.plan);
    }
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    for (const StreamTable& t : tables) {
      std::printf("roofline: %s rows (stride %llu) %s to %s, dim %llu, isa %s, %d threads, %llu rows per call\n",
                  std::string(dtype_name(t.dtype)).c_str(), static_cast<unsigned long long>(t.stride),
                  args.bag ? ("pooled by " + std::to_string(args.bag)).c_str() : "streamed",
                  std::string(output_dtype_name(out)).c_str(), static_cast<unsigned long long>(t.dim),
                  std::string(isa_name(isa)).c_str(), threads, static_cast<unsigned long long>(tokens));
    }
    std::printf("  %s\n", sizes_text(sizes, llc).c_str());
    std::printf("  %.3f M tokens/s, %.2f GB/s (%.0f bytes per token: table rows read + output written)\n",
                tokens_per_second / 1e6, gbps, bytes_per_token);
    std::printf("  the fastest way: %s\n", way_name(best).c_str());
  }
  return kExitOk;
}

// The table row an output reads for `id` (row 0 for an id past a row-0 output's table).
const std::byte* decode_row(const OutputInfo& o, std::int64_t id) {
  const bool inside = id >= 0 && static_cast<std::uint64_t>(id) < o.vocab_size();
  return o.token->row(inside ? static_cast<std::uint64_t>(o.row_of(static_cast<std::uint64_t>(id))) : 0);
}

// Waits `us` microseconds on the calling core: the rest of a decode step (attention, sampling)
// standing between the moment the next token is known and the moment its rows are needed.
void other_work(double us) {
  const auto until = clock::now() + std::chrono::duration<double, std::micro>(us);
  while (clock::now() < until) {
  }
}

// --evict: single-token decode with every asked output's token row and output evicted from every
// cache before each call, interleaved with the physical limit of the same rows (every line of
// every row prefetched at once, then each output's add: perf/roofline_kernels.hpp). With
// --prefetch-ahead, an A/B of Embedder::prefetch: the rows evicted (the outputs not: a decode
// loop's buffer stays cached), the given microseconds of other work, then the call; and the same
// with Embedder::prefetch of the id before the other work (what a decode loop that knows its next
// token early can have).
int run_cold_decode(const BenchArgs& args, const Model& model, const Embedder& embedder,
                    const std::vector<std::vector<std::int64_t>>& ids, const std::vector<std::size_t>& selected,
                    const std::vector<OutputTarget>& targets, json doc) {
  struct Cold {
    const OutputInfo* info;
    std::uint64_t row_bytes;
    perf::DecodeLimit limit;
    std::byte* out;
    std::uint64_t out_bytes;
    const std::byte* position;
  };
  std::vector<Cold> colds;
  for (std::size_t k = 0; k < selected.size(); ++k) {
    const OutputInfo& o = model.outputs()[selected[k]];
    const OutputSpan& out = targets[k].span;
    Cold c{&o, row_bytes(o.token->dtype, o.dim()),
           perf::roofline_kernels(embedder.isa()).get_decode(o.token->dtype, out.dtype()),
           static_cast<std::byte*>(out.data()), out.size() * output_element_bytes(out.dtype()), nullptr};
    if (o.position) c.position = o.position->row(o.rules->position_offset);
    colds.push_back(c);
  }
  const auto evict_all = [&](std::int64_t id) {
    for (const Cold& c : colds) {
      perf::evict(decode_row(*c.info, id), c.row_bytes);
      perf::evict(c.out, c.out_bytes);
    }
  };
  const auto evict_rows = [&](std::int64_t id) {
    for (const Cold& c : colds) perf::evict(decode_row(*c.info, id), c.row_bytes);
  };
  const bool ahead = args.prefetch_ahead_us >= 0;
  std::vector<double> embedrt_ns, limit_ns, timer_ns, rows_cold_ns, prefetched_ns, prefetch_call_ns;
  EmbedRequest request;
  request.sequences = 1;
  const bool primary_only = selected.size() == 1 && selected[0] == 0;
  const auto embed = [&] { return primary_only ? embedder.embed(request, targets[0].span) : embedder.embed(request, targets); };
  const auto deadline = clock::now() + std::chrono::duration<double>(args.seconds);
  for (std::uint64_t k = 0; embedrt_ns.size() < 1000 || (clock::now() < deadline && embedrt_ns.size() < 1000000); ++k) {
    const std::int64_t id = ids[k % ids.size()][0];
    request.ids = std::span<const std::int64_t>(&ids[k % ids.size()][0], 1);
    evict_all(id);
    const Status s = timed_ns(embedrt_ns, embed);
    if (!s) return report(s.error());
    if (ahead) {
      // A and B of the prefetch: the rows evicted, the outputs left as the last call left them
      // (a decode loop reuses its buffer, so it stays cached), the same wait before both calls.
      evict_rows(id);
      other_work(args.prefetch_ahead_us);
      (void)timed_ns(rows_cold_ns, embed);
      evict_rows(id);
      const Status p = timed_ns(prefetch_call_ns, [&] { return embedder.prefetch(request.ids, selected); });
      if (!p) return report(p.error());
      other_work(args.prefetch_ahead_us);
      (void)timed_ns(prefetched_ns, embed);
    }
    evict_all(id);
    timed_ns(limit_ns, [&] {
      if (colds.size() > 1) {  // every row's misses in flight before the first add (each limit prefetches its own)
        for (const Cold& c : colds) perf::prefetch(decode_row(*c.info, id), c.row_bytes);
      }
      for (const Cold& c : colds) {
        const std::uint64_t dim = c.info->dim();
        c.limit({decode_row(*c.info, id), c.position, c.row_bytes, dim, row_params_offset(c.info->token->dtype, dim), c.out});
      }
    });
    timed_ns(timer_ns, [] {});
  }
  const double e = percentile(embedrt_ns, 50), l = percentile(limit_ns, 50), t = percentile(timer_ns, 50);
  const auto ns = [](const std::vector<double>& v) {
    return json{{"p50", percentile(v, 50)}, {"p90", percentile(v, 90)}, {"p99", percentile(v, 99)}, {"min", percentile(v, 0)}};
  };
  if (args.json) {
    doc["mode"] = "decode_cold";
    doc["samples"] = embedrt_ns.size();
    doc["embedrt_ns"] = ns(embedrt_ns);
    doc["limit_ns"] = ns(limit_ns);
    doc["timer_ns"] = ns(timer_ns);
    doc["ratio_to_limit"] = e / l;
    if (ahead) {
      doc["prefetch_ahead_us"] = args.prefetch_ahead_us;
      doc["rows_cold_ns"] = ns(rows_cold_ns);
      doc["prefetched_ns"] = ns(prefetched_ns);
      doc["prefetch_call_ns"] = ns(prefetch_call_ns);
    }
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    std::printf("cold decode (rows and outputs evicted before each call), %zu calls each, interleaved:\n", embedrt_ns.size());
    std::printf("  embedrt p50 %.0f ns (p90 %.0f, p99 %.0f)\n", e, percentile(embedrt_ns, 90), percentile(embedrt_ns, 99));
    if (ahead) {
      std::printf("  rows evicted, output cached, %.1f us of other work first: p50 %.0f ns (p90 %.0f, p99 %.0f)\n",
                  args.prefetch_ahead_us, percentile(rows_cold_ns, 50), percentile(rows_cold_ns, 90),
                  percentile(rows_cold_ns, 99));
      std::printf("  the same after Embedder::prefetch: p50 %.0f ns (p90 %.0f, p99 %.0f); the prefetch call p50 %.0f ns\n",
                  percentile(prefetched_ns, 50), percentile(prefetched_ns, 90), percentile(prefetched_ns, 99),
                  percentile(prefetch_call_ns, 50));
    }
    std::printf("  limit   p50 %.0f ns (p90 %.0f, p99 %.0f): the rows' lines prefetched at once, then the add\n", l,
                percentile(limit_ns, 90), percentile(limit_ns, 99));
    std::printf("  embedrt / limit: %.2fx (timer overhead %.0f ns, included in both)\n", e / l, t);
  }
  return kExitOk;
}

// The outputs --output names (indices into Model::outputs() or the synthetic spec's), every
// output when none is named (a bag: the primary); an error naming an unknown one.
Result<std::vector<std::size_t>> select_outputs(const BenchArgs& args, const std::vector<std::string>& names) {
  std::vector<std::size_t> selected;
  if (args.outputs.empty()) {
    for (std::size_t k = 0; k < (args.bag ? 1 : names.size()); ++k) selected.push_back(k);
    return selected;
  }
  for (const std::string& name : args.outputs) {
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      return Error(ErrorCode::kInvalidArgument, "--output '" + name + "': the model's outputs are " + known);
    }
    const auto k = static_cast<std::size_t>(it - names.begin());
    if (std::find(selected.begin(), selected.end(), k) != selected.end()) {
      return Error(ErrorCode::kInvalidArgument, "--output '" + name + "' given twice");
    }
    selected.push_back(k);
  }
  if (args.bag && selected.size() > 1) {
    return Error(ErrorCode::kInvalidArgument, "--bag pools one output: give at most one --output");
  }
  return selected;
}

int run(const BenchArgs& args) {
  const auto parsed = parse_output_dtype(args.out_dtype);
  if (!parsed) {
    return report(Error(ErrorCode::kInvalidArgument, "--out-dtype '" + args.out_dtype + "': expected f32, bf16 or f16"));
  }
  const OutputDType dtype = *parsed;
  if (args.batch == 0 || args.seq == 0) return report(Error(ErrorCode::kInvalidArgument, "--batch and --seq must be at least 1"));
  const int given = !args.model.empty() + !args.synthetic.empty() + !args.gemma3n.empty();
  if (given != 1) {
    return report(Error(ErrorCode::kInvalidArgument,
                        "give a MODEL, --synthetic VOCABxDIM or --synthetic-gemma3n e2b|e4b (one of them)"));
  }
  const std::uint64_t tokens = args.batch * args.seq;  // each <= 2^26 (checked options): no overflow
  if (args.evict && tokens != 1) {
    return report(Error(ErrorCode::kInvalidArgument, "--evict measures single-token decode: give --batch 1 --seq 1"));
  }
  if (args.prefetch_ahead_us >= 0 && !args.evict) {
    return report(Error(ErrorCode::kInvalidArgument, "--prefetch-ahead measures cold decode: give it with --evict"));
  }
  if (args.bag) {
    if (args.seq % args.bag != 0) {
      return report(Error(ErrorCode::kInvalidArgument, "--bag " + std::to_string(args.bag) + " does not divide --seq " +
                                                           std::to_string(args.seq) + ": each sequence is split into equal bags"));
    }
    if (args.evict) return report(Error(ErrorCode::kInvalidArgument, "--evict measures a gather: not with --bag"));
  } else if (!args.pooling.empty() || args.normalize || args.weights) {
    return report(Error(ErrorCode::kInvalidArgument, "--pooling, --normalize and --weights apply to bags: give --bag N"));
  }
  std::optional<PoolingMode> pooling;
  if (!args.pooling.empty()) {
    pooling = parse_pooling_mode(args.pooling);
    if (!pooling || *pooling == PoolingMode::kNone) {
      return report(Error(ErrorCode::kInvalidArgument, "--pooling '" + args.pooling + "': expected sum, mean or max"));
    }
  }
  const int threads = args.threads > 0 ? args.threads : tbb::this_task_arena::max_concurrency();
  const perf::CacheInfo llc = perf::last_level_cache();
  std::optional<Isa> forced;
  if (!args.isa.empty()) {
    forced = parse_isa(args.isa);
    if (!forced) return report(Error(ErrorCode::kInvalidArgument, "--isa '" + args.isa + "' is not an ISA name"));
  }
  std::optional<perf::SyntheticSpec> spec;
  if (model_is_synthetic(args)) {
    auto s = synthetic_spec(args);
    if (!s) return report(s.error());
    spec = *s;
  }

  // The roofline needs the case's dtypes and widths only: no model is written, and a user's
  // model is opened lazily (its header and directory).
  if (args.roofline) {
    std::vector<StreamTable> tables;
    if (spec) {
      tables.push_back({"embeddings", spec->dtype, spec->dim, default_row_stride(spec->dtype, spec->dim)});
      if (spec->extra.vocab) {
        tables.push_back({spec->extra.name, spec->dtype, spec->extra.dim, default_row_stride(spec->dtype, spec->extra.dim)});
      }
    } else {
      auto model = Model::open(args.model, {.residency = Residency::kMmap});
      if (!model) return report(model.error());
      for (const OutputInfo& o : model->outputs()) tables.push_back({o.name, o.token->dtype, o.dim(), o.token->row_stride});
    }
    std::vector<std::string> names;
    for (const auto& t : tables) names.push_back(t.name);
    auto selected = select_outputs(args, names);
    if (!selected) return report(selected.error());
    std::vector<StreamTable> chosen;
    for (std::size_t k : *selected) chosen.push_back(tables[k]);
    Isa isa = Isa::kScalar;
    if (forced) {
      isa = *forced;
    } else {
      auto chosen_isa = default_isa();
      if (!chosen_isa) return report(chosen_isa.error());
      isa = *chosen_isa;
    }
    if (!isa_supported(isa)) {
      const char* why = isa_built(isa) ? " is not supported by this CPU" : " is not built into this library";
      return report(Error(ErrorCode::kUnsupported, "ISA " + args.isa + why));
    }
    return run_roofline(args, chosen, dtype, isa, threads, llc);
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
  std::vector<std::string> names;
  for (const OutputInfo& o : model->outputs()) names.push_back(o.name);
  auto chosen = select_outputs(args, names);
  if (!chosen) return report(chosen.error());
  const std::vector<std::size_t> selected = *chosen;
  const OutputInfo& lead = model->outputs()[selected[0]];  // ids are drawn from its vocabulary
  if (!args.bag && args.seq > lead.max_positions()) {
    return report(Error(ErrorCode::kInvalidArgument, "--seq " + std::to_string(args.seq) + " is longer than the model's " +
                                                         std::to_string(lead.max_positions()) + " positions"));
  }
  tbb::task_arena arena(threads);
  EmbedderOptions options;
  options.arena = &arena;
  options.nontemporal = args.nontemporal;
  options.prefetch_level = args.prefetch_level;
  options.min_rows_ahead = args.min_rows_ahead;
  options.isa = forced;
  auto embedder = Embedder::create(*model, options);
  if (!embedder) return report(embedder.error());

  const std::uint64_t sets = std::max<std::uint64_t>(1, args.id_sets);
  const std::uint64_t out_sets = std::max<std::uint64_t>(1, args.out_sets);
  const std::uint64_t bag = std::max<std::uint64_t>(1, args.bag);
  const std::uint64_t out_rows = tokens / bag;
  // Per call: each output's bytes, and the table bytes read and output bytes written per token.
  std::vector<std::uint64_t> out_bytes;
  std::uint64_t out_call = 0, table_bytes = 0, touched = 0;
  double bytes_per_token = 0;
  for (std::size_t k : selected) {
    const OutputInfo& o = model->outputs()[k];
    out_bytes.push_back(out_rows * o.dim() * output_element_bytes(dtype));
    out_call += out_bytes.back();
    table_bytes += o.token->bytes.size();
    // Ids past a second output's rows read its row 0 (Gemma 3n): count at most its rows.
    touched += perf::touched_bytes(std::min(o.token->rows, lead.vocab_size()), o.token->row_stride, tokens * sets);
    bytes_per_token += static_cast<double>(row_bytes(o.token->dtype, o.dim())) +
                       static_cast<double>(o.dim() * output_element_bytes(dtype)) / static_cast<double>(bag);
  }
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
  std::uniform_int_distribution<std::int64_t> pick(0, static_cast<std::int64_t>(lead.vocab_size()) - 1);
  for (auto& batch : id_batches) {
    for (auto& id : batch) id = pick(rng);
  }
  // Output buffers are cache-line aligned, as a server's buffers should be: a row start that is
  // not lets streaming stores share a line with the scalar head (see the kernel's peeling).
  std::vector<std::vector<std::byte>> storage;
  std::vector<std::vector<OutputTarget>> targets(out_sets);
  for (std::uint64_t set = 0; set < out_sets; ++set) {
    for (std::size_t k = 0; k < selected.size(); ++k) {
      auto& buffer = storage.emplace_back(out_bytes[k] + 64);  // zero-filled: first-touch faults happen here
      std::byte* aligned = buffer.data() + (64 - reinterpret_cast<std::uintptr_t>(buffer.data()) % 64) % 64;
      auto span = OutputSpan::from_bytes({aligned, out_bytes[k]}, dtype);
      if (!span) return report(span.error());
      targets[set].push_back({selected[k], *span});
    }
  }
  // --weights: one weight per id position, the same for every id set (how the weights are drawn
  // does not change the work; that there is one per id does).
  std::vector<float> weights;
  if (args.weights) {
    std::uniform_real_distribution<float> draw(0.5f, 1.5f);
    weights.resize(tokens);
    for (float& w : weights) w = draw(rng);
  }
  std::vector<EmbedRequest> requests(sets);
  std::vector<BagRequest> bags(sets);
  for (std::uint64_t k = 0; k < sets; ++k) {
    requests[k].ids = id_batches[k];
    requests[k].sequences = args.batch;
    bags[k].ids = id_batches[k];
    bags[k].bags = out_rows;
    bags[k].mode = pooling;
    if (!pooling && lead.rules->pooling == PoolingMode::kNone) bags[k].mode = PoolingMode::kSum;
    if (args.normalize) bags[k].normalize = true;
    bags[k].weights = weights;
  }
  const bool primary_only = selected.size() == 1 && selected[0] == 0;
  const auto embed = [&](std::uint64_t call) {
    const auto& out = targets[call % out_sets];
    if (args.bag) return embedder->pool(bags[call % sets], out[0].span, out[0].output);
    if (primary_only) return embedder->embed(requests[call % sets], out[0].span);
    return embedder->embed(requests[call % sets], out);
  };

  const TableView& token = *lead.token;
  const json sizes = sizes_json(llc, table_bytes, touched, out_call, out_sets);
  json output_names = json::array();
  for (std::size_t k : selected) output_names.push_back(model->outputs()[k].name);
  json doc = {{"mode", args.bag ? "bags" : "gather"},
              {"model", spec ? "synthetic " + spec->describe() : args.model},
              {"isa", isa_name(embedder->isa())}, {"threads", threads},
              {"table_dtype", dtype_name(token.dtype)}, {"out_dtype", args.out_dtype},
              {"batch", args.batch}, {"seq", args.seq}, {"dim", lead.dim()}, {"vocab", lead.vocab_size()},
              {"outputs", output_names}, {"bytes_per_token", bytes_per_token},
              {"id_sets", sets}, {"out_sets", out_sets}, {"llc", llc_json(llc)}, {"sizes", sizes},
              // as asked, and as the Embedder resolved it for the lead output's table
              {"prefetch_level", prefetch_level_name(args.prefetch_level)},
              {"prefetch_level_used", prefetch_level_name(embedder->prefetch_level(selected[0]))},
              {"min_rows_ahead_used", embedder->min_rows_ahead(selected[0])}};
  if (args.prefetch_level == PrefetchLevel::kAuto) {
    const PrefetchCalibration& c = prefetch_calibration(embedder->isa(), model->file().residency() == Residency::kCopy);
    doc["prefetch_calibration"] = {{"level", prefetch_level_name(c.level)}, {"l1_gbs", c.l1_gbs}, {"l2_gbs", c.l2_gbs},
                                   {"min_rows_ahead", c.min_rows_ahead}, {"near_gbs", c.near_gbs},
                                   {"far_gbs", c.far_gbs}, {"table_bytes", c.table_bytes}, {"note", c.note}};
  }
  if (args.bag) {
    const PoolingMode mode = bags[0].mode.value_or(lead.rules->pooling);
    doc["bag"] = args.bag;
    doc["bags_per_call"] = out_rows;
    doc["pooling"] = pooling_mode_name(mode);
    doc["normalize"] = bags[0].normalize.value_or(lead.rules->normalize);
    doc["weights"] = args.weights;
  }

  // The first call after open: what a server's first request pays for the residency chosen.
  const auto first_start = clock::now();
  if (Status s = embed(0); !s) return report(s.error());
  const double first_seconds = std::chrono::duration<double>(clock::now() - first_start).count();
  const auto table_memory = perf::range_memory(token.bytes.data(), token.bytes.size());
  doc["residency"] = {{"mode", residency_name(args.open.residency)}, {"locked", args.open.lock_in_memory},
                      {"cold_file", args.cold_file}, {"open_seconds", open_seconds},
                      {"first_call_seconds", first_seconds}, {"thp", perf::transparent_hugepage_mode()},
                      {"table_rss", table_memory.rss}, {"table_anon_huge", table_memory.anon_huge},
                      {"table_file_pmd", table_memory.file_pmd}};

  if (args.evict) return run_cold_decode(args, *model, *embedder, id_batches, selected, targets[0], doc);

  std::uint64_t call = 0;
  Status failed;
  const auto next = [&] {
    const Status s = embed(call);
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
  const double tokens_per_second = static_cast<double>(tokens) / median;
  const double gbps = tokens_per_second * bytes_per_token / 1e9;
  if (args.json) {
    doc["samples"] = seconds.size();
    doc["calls_per_sample"] = per_sample;
    doc["tokens_per_second"] = tokens_per_second;
    if (args.bag) doc["bags_per_second"] = tokens_per_second / static_cast<double>(bag);
    doc["gb_per_second"] = gbps;
    doc["latency_seconds"] = latency_json(seconds);
    doc["cpu_tokens_per_second"] = static_cast<double>(tokens) / percentile(measured.cpu, 50);
    doc["latency_cpu_seconds"] = latency_json(measured.cpu);
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    std::string outputs;
    for (const auto& n : output_names) outputs += (outputs.empty() ? "" : ", ") + n.get<std::string>();
    std::printf("%s: %s table, %s output (%s), isa %s, %d threads, batch %llu x %llu (dim %llu), %zu runs\n",
                doc["model"].get<std::string>().c_str(), std::string(dtype_name(token.dtype)).c_str(),
                args.out_dtype.c_str(), outputs.c_str(), std::string(isa_name(embedder->isa())).c_str(), threads,
                static_cast<unsigned long long>(args.batch), static_cast<unsigned long long>(args.seq),
                static_cast<unsigned long long>(lead.dim()), seconds.size());
    if (args.bag) {
      std::printf("  bags of %llu ids, %s%s%s: %.3f M bags/s\n", static_cast<unsigned long long>(bag),
                  doc["pooling"].get<std::string>().c_str(), args.weights ? ", weighted" : "",
                  doc["normalize"].get<bool>() ? ", normalized" : "", tokens_per_second / static_cast<double>(bag) / 1e6);
    }
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
  cmd->add_option("--synthetic-gemma3n", args->gemma3n,
                  "generate Gemma 3n's two tables instead (e2b or e4b): 262400 x hidden bf16 times sqrt(hidden), and the "
                  "per-layer output 262144 x layers*256 bf16 times 16, ids past it reading row 0 (5-6 GB; see --synthetic-file)");
  cmd->add_option("--second-output", args->second_output,
                  "--synthetic: a second output named 'second' with its own table of this shape (ROWSxWIDTH) and dtype; "
                  "ids past its rows read row 0, as Gemma 3n's per-layer table");
  cmd->add_option("--dtype", args->dtype, "--synthetic's table dtype: f32, f16, bf16, int8 or int4 (default f32)");
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
  cmd->add_option("--isa", args->isa, "force a kernel: " + known_list());
  cmd->add_option("--seconds", args->seconds, "how long to measure (default 2; --roofline: that once per way it tries: no prefetch, then 4, 8 and 16 KiB ahead into L1 and, where the ISA has L2 kernels, into L2)")->check(CLI::Range(0.01, 3600.0));
  cmd->add_flag("--json", args->json, "print one JSON object");
  add_nontemporal_option(cmd, args->nontemporal);
  add_prefetch_level_option(cmd, args->prefetch_level);
  add_min_rows_ahead_option(cmd, args->min_rows_ahead);
  cmd->add_option("--id-sets", args->id_sets, "random id batches rotated between calls (default 8)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20));
  cmd->add_option("--out-sets", args->out_sets, "output buffers rotated between calls (default 1)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1024}));
  cmd->add_option("--output", args->outputs,
                  "an output to compute, by name (repeatable; default: every output of the model, in one call)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--bag", args->bag,
                  "pool bags of N ids (Embedder::pool) instead of a gather: each sequence split into --seq / N bags")
      ->check(CLI::Range(std::uint64_t{1}, kMaxTokens));
  cmd->add_option("--pooling", args->pooling, "--bag: sum, mean or max (default: the output's pooling, else sum)");
  cmd->add_flag("--normalize", args->normalize, "--bag: L2-normalize each pooled vector");
  cmd->add_flag("--weights", args->weights, "--bag: a random weight per id (PyTorch's per_sample_weights; their 4 bytes an id are not in the GB/s)");
  add_open_options(cmd, args->open, true);
  cmd->add_flag("--cold-file", args->cold_file,
                "drop the model file from the page cache before opening it (first request from disk)");
  cmd->add_flag("--roofline", args->roofline,
                "measure the case's roofline instead: its table rows streamed in order to its output dtype, over "
                "buffers 4x the last-level cache; the fastest of the rows ahead prefetched in software at a few "
                "distances or not (and of four ways to pool wide bags)");
  cmd->add_flag("--evict", args->evict,
                "cold single-token decode: the row and output evicted (clflush) before each call, beside the "
                "physical limit (the row's lines prefetched at once, then the add)");
  cmd->add_option("--prefetch-ahead", args->prefetch_ahead_us,
                  "--evict: also an A/B of Embedder::prefetch, interleaved with the cold calls: the rows evicted (the "
                  "output kept, as a decode loop's buffer), this many microseconds of other work, then the call; and the "
                  "same with the id prefetched before the other work (a decode loop that knows its next token early)")
      ->check(CLI::Range(0.0, 1e6));
  return [args]() { return run(*args); };
}

}  // namespace embedrt::cli
