// `embedrt bench`: throughput and latency of the kernels on a user's own model.
#include <algorithm>
#include <cstring>
#include <oneapi/tbb/parallel_for.h>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <oneapi/tbb/task_arena.h>
#include <random>
#include <string>
#include <vector>

#include "commands.hpp"
#include "embedrt/embedder.hpp"
#include "text_format.hpp"

namespace embedrt::cli {
namespace {

// Tokens per call at most (batch x seq), and the memory a run may allocate for ids and output:
// past these, a typo in --batch would otherwise end in bad_alloc.
constexpr std::uint64_t kMaxTokens = std::uint64_t{1} << 26;
constexpr std::uint64_t kMaxBenchBytes = std::uint64_t{16} << 30;

struct BenchArgs {
  std::string model;
  std::uint64_t batch = 8, seq = 1024;
  int threads = 0;  // 0: every core
  std::string out_dtype = "f32";
  std::string isa;
  double seconds = 2.0;
  bool json = false;
  std::string nontemporal = "auto";
  bool roofline = false;
  std::uint64_t id_sets = 8;
  OpenOptions open{.residency = Residency::kPopulate};
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const auto k = static_cast<std::size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(k, v.size() - 1)];
}

// The memory-copy roofline on the same threads: bytes read + written per second by memcpy of
// 256 MiB split across the arena, median of the samples.
int run_roofline(const BenchArgs& args, tbb::task_arena& arena, int threads) {
  const std::size_t bytes = 256u << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 2);
  std::vector<double> seconds;
  const auto copy = [&] {
    arena.execute([&] {
      tbb::parallel_for(0, threads, [&](int t) {
        const std::size_t begin = bytes / static_cast<std::size_t>(threads) * static_cast<std::size_t>(t);
        const std::size_t end = t + 1 == threads ? bytes : begin + bytes / static_cast<std::size_t>(threads);
        std::memcpy(dst.data() + begin, src.data() + begin, end - begin);
      });
    });
  };
  copy();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(args.seconds);
  while (seconds.size() < 5 || std::chrono::steady_clock::now() < deadline) {
    const auto start = std::chrono::steady_clock::now();
    copy();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const double gbps = 2.0 * static_cast<double>(bytes) / percentile(seconds, 50) / 1e9;
  if (args.json) {
    std::printf("%s\n", nlohmann::ordered_json{{"roofline", "memcpy"}, {"bytes", bytes}, {"threads", threads},
                                               {"gb_per_second", gbps}, {"iterations", seconds.size()}}.dump(2).c_str());
  } else {
    std::printf("memcpy of 256 MiB on %d threads: %.2f GB/s (bytes read + written), %zu runs\n", threads, gbps, seconds.size());
  }
  return kExitOk;
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

int run(const BenchArgs& args) {
  const auto parsed = parse_output_dtype(args.out_dtype);
  if (!parsed) {
    return report(Error(ErrorCode::kInvalidArgument, "--out-dtype '" + args.out_dtype + "': expected f32, bf16 or f16"));
  }
  const OutputDType dtype = *parsed;
  if (args.batch == 0 || args.seq == 0) return report(Error(ErrorCode::kInvalidArgument, "--batch and --seq must be at least 1"));
  if (args.roofline) {
    const int threads = args.threads > 0 ? args.threads : tbb::this_task_arena::max_concurrency();
    tbb::task_arena arena(threads);
    return run_roofline(args, arena, threads);
  }
  auto model = Model::open(args.model, args.open);
  if (!model) return report(model.error());
  if (args.seq > model->max_positions()) {
    return report(Error(ErrorCode::kInvalidArgument, "--seq " + std::to_string(args.seq) + " is longer than the model's " +
                                                         std::to_string(model->max_positions()) + " positions"));
  }
  const int threads = args.threads > 0 ? args.threads : tbb::this_task_arena::max_concurrency();
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
  if (!args.isa.empty()) {
    options.isa = parse_isa(args.isa);
    if (!options.isa) return report(Error(ErrorCode::kInvalidArgument, "--isa '" + args.isa + "' is not an ISA name"));
  }
  auto embedder = Embedder::create(*model, options);
  if (!embedder) return report(embedder.error());

  const std::uint64_t dim = model->dim();
  const std::uint64_t tokens = args.batch * args.seq;  // each <= 2^26 (checked options): no overflow
  const std::uint64_t per_token = 8 * args.id_sets + dim * output_element_bytes(dtype);
  std::uint64_t needed = 0;
  if (tokens > kMaxTokens || __builtin_mul_overflow(tokens, per_token, &needed) || needed > kMaxBenchBytes) {
    return report(Error(ErrorCode::kInvalidArgument,
                        "--batch " + std::to_string(args.batch) + " x --seq " + std::to_string(args.seq) +
                            " is past the bench's limit of " + std::to_string(kMaxTokens) + " tokens per call and " +
                            std::to_string(kMaxBenchBytes >> 30) + " GiB of ids and output"));
  }
  // Calls rotate through several random id batches, so that (for large batches) the rows touched
  // across calls exceed the last-level cache and the figure is a memory-bound one, not a cached one.
  const std::uint64_t sets = std::max<std::uint64_t>(1, args.id_sets);
  std::vector<std::vector<std::int64_t>> id_batches(sets, std::vector<std::int64_t>(tokens));
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<std::int64_t> pick(0, static_cast<std::int64_t>(model->vocab_size()) - 1);
  for (auto& batch : id_batches) {
    for (auto& id : batch) id = pick(rng);
  }
  // The output buffer is cache-line aligned, as a server's buffers should be: a row start that
  // is not lets streaming stores share a line with the scalar head (see the kernel's peeling).
  const std::size_t out_bytes = tokens * dim * (dtype == OutputDType::kF32 ? 4 : 2);
  std::vector<std::byte> storage(out_bytes + 64);
  void* aligned = storage.data() + (64 - reinterpret_cast<std::uintptr_t>(storage.data()) % 64) % 64;
  auto out_span = OutputSpan::from_bytes({static_cast<std::byte*>(aligned), out_bytes}, dtype);
  if (!out_span) return report(out_span.error());
  const OutputSpan out = *out_span;
  std::vector<EmbedRequest> requests(sets);
  for (std::uint64_t k = 0; k < sets; ++k) {
    requests[k].ids = id_batches[k];
    requests[k].sequences = args.batch;
  }
  std::uint64_t call = 0;
  const auto next = [&]() -> const EmbedRequest& { return requests[call++ % sets]; };

  using clock = std::chrono::steady_clock;
  for (int i = 0; i < 3; ++i) {  // warm-up: page faults on the output, thread start-up
    if (Status s = embedder->embed(next(), out); !s) return report(s.error());
  }
  // Calls shorter than a few microseconds are timed K at a time (a clock read costs tens of
  // nanoseconds); each sample is then the mean of its K calls.
  std::uint64_t per_sample = 1;
  for (;;) {
    const auto start = clock::now();
    for (std::uint64_t k = 0; k < per_sample; ++k) (void)embedder->embed(next(), out);
    if (clock::now() - start >= std::chrono::microseconds(20) || per_sample >= (1u << 20)) break;
    per_sample *= 2;
  }
  std::vector<double> seconds;
  const auto deadline = clock::now() + std::chrono::duration<double>(args.seconds);
  while (seconds.size() < 10 || (clock::now() < deadline && seconds.size() < 200000)) {
    const auto start = clock::now();
    Status s;
    for (std::uint64_t k = 0; k < per_sample; ++k) s = embedder->embed(next(), out);
    seconds.push_back(std::chrono::duration<double>(clock::now() - start).count() / static_cast<double>(per_sample));
    if (!s) return report(s.error());
  }
  const double median = percentile(seconds, 50);
  const double bytes_per_token = static_cast<double>(row_bytes(model->token().dtype, dim) +
                                                     dim * (dtype == OutputDType::kF32 ? 4 : 2));
  const double tokens_per_second = static_cast<double>(tokens) / median;
  const double gbps = tokens_per_second * bytes_per_token / 1e9;
  if (args.json) {
    nlohmann::ordered_json doc = {
        {"model", args.model}, {"isa", isa_name(embedder->isa())}, {"threads", threads},
        {"table_dtype", dtype_name(model->token().dtype)}, {"out_dtype", args.out_dtype},
        {"batch", args.batch}, {"seq", args.seq}, {"dim", dim}, {"id_sets", sets}, {"samples", seconds.size()},
        {"calls_per_sample", per_sample},
        {"tokens_per_second", tokens_per_second}, {"gb_per_second", gbps},
        {"latency_seconds", {{"p50", median}, {"p90", percentile(seconds, 90)}, {"p99", percentile(seconds, 99)},
                             {"min", percentile(seconds, 0)}}},
    };
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    std::printf("%s: %s table, %s output, isa %s, %d threads, batch %llu x %llu (dim %llu), %zu runs\n",
                args.model.c_str(), std::string(dtype_name(model->token().dtype)).c_str(), args.out_dtype.c_str(),
                std::string(isa_name(embedder->isa())).c_str(), threads, static_cast<unsigned long long>(args.batch),
                static_cast<unsigned long long>(args.seq), static_cast<unsigned long long>(dim), seconds.size());
    std::printf("  %.3f M tokens/s, %.2f GB/s (table rows read + output written)\n", tokens_per_second / 1e6, gbps);
    std::printf("  latency p50 %s, p90 %s, p99 %s, min %s\n", duration(median).c_str(),
                duration(percentile(seconds, 90)).c_str(), duration(percentile(seconds, 99)).c_str(),
                duration(percentile(seconds, 0)).c_str());
  }
  return kExitOk;
}

}  // namespace

Runner add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Measure tokens/s, GB/s and latency on a model");
  auto args = std::make_shared<BenchArgs>();
  cmd->add_option("MODEL", args->model, "the .embt model")->required();
  cmd->add_option("--batch", args->batch, "sequences per call (default 8)")->check(CLI::Range(std::uint64_t{1}, kMaxTokens));
  cmd->add_option("--seq", args->seq, "tokens per sequence (default 1024)")->check(CLI::Range(std::uint64_t{1}, kMaxTokens));
  cmd->add_option("--threads", args->threads, "threads (default 0: every core)")->check(CLI::Range(0, 1024));
  cmd->add_option("--out-dtype", args->out_dtype, "f32, bf16 or f16");
  cmd->add_option("--isa", args->isa, "force a kernel: scalar, sse4.2, avx2 or avx512");
  cmd->add_option("--seconds", args->seconds, "how long to measure (default 2)")->check(CLI::Range(0.01, 3600.0));
  cmd->add_flag("--json", args->json, "print one JSON object");
  cmd->add_option("--nontemporal", args->nontemporal, "streaming stores: auto (by output size), always or never");
  cmd->add_option("--id-sets", args->id_sets, "random id batches rotated between calls (default 8)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1024}));
  add_open_options(cmd, args->open, true);
  cmd->add_flag("--roofline", args->roofline, "measure the memory-copy roofline on these threads instead (MODEL is ignored)");
  return [args]() { return run(*args); };
}

}  // namespace embedrt::cli
