// Google Benchmark programs for the kernels: every case of issue 12 (GPT-2 in each dtype, int4 too, and bf16
// output, BERT-base with LayerNorm, Llama-3 and Gemma-3 shapes, small dims over tables 4x the
// last-level cache), each beside its honest roofline (tools/perf/roofline.hpp: the same bytes
// streamed in order, same ISA, same threads), plus warm and cold single-token decode beside the
// cold row's physical limit. Counters give tokens/s and each size against the LLC; the JSON
// context carries the ISA, the LLC and the thread counts.
//
//   build/release/bench/embedrt_bench_kernels --benchmark_format=json --benchmark_out=kernels.json
//   build/release/bench/embedrt_bench_kernels --benchmark_filter='GPT2|Roofline/gpt2'   # a subset
//
// Generated models live in $TMPDIR only while the program runs (Gemma-3's table is 2.8 GB).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <oneapi/tbb/task_arena.h>
#include <random>
#include <thread>

#include "embedrt/embedder.hpp"
#include "embedrt/embedrt.hpp"
#include "id_rotation.hpp"
#include "machine.hpp"
#include "roofline.hpp"
#include "roofline_kernels.hpp"
#include "synthetic_model.hpp"

namespace {

using embedrt::DType;
using embedrt::OutputDType;
using embedrt::perf::SyntheticSpec;

const embedrt::perf::CacheInfo& llc() {
  static const embedrt::perf::CacheInfo info = embedrt::perf::last_level_cache();
  return info;
}

struct Case {
  const char* name;
  SyntheticSpec spec;
  OutputDType out;
  std::uint64_t batch, seq;
};

// Vocabulary of a small-dim table 4x the LLC: the DRAM-bound case at that width.
std::uint64_t vocab_past_llc(DType dtype, std::uint64_t dim) {
  return 4 * llc().bytes / embedrt::default_row_stride(dtype, dim) + 1;
}

std::vector<Case> cases() {
  std::vector<Case> all;
  const auto gpt2 = [](DType d) { return SyntheticSpec{50257, 768, d, 1024}; };
  all.push_back({"gpt2/f32->f32", gpt2(DType::kF32), OutputDType::kF32, 8, 1024});
  all.push_back({"gpt2/bf16->f32", gpt2(DType::kBF16), OutputDType::kF32, 8, 1024});
  all.push_back({"gpt2/f16->f32", gpt2(DType::kF16), OutputDType::kF32, 8, 1024});
  all.push_back({"gpt2/int8->f32", gpt2(DType::kInt8Rowwise), OutputDType::kF32, 8, 1024});
  all.push_back({"gpt2/int4->f32", gpt2(DType::kInt4Rowwise), OutputDType::kF32, 8, 1024});
  all.push_back({"gpt2/f32->bf16", gpt2(DType::kF32), OutputDType::kBF16, 8, 1024});
  all.push_back({"gpt2/bf16->bf16", gpt2(DType::kBF16), OutputDType::kBF16, 8, 1024});
  all.push_back({"bert/f32+ln", {30522, 768, DType::kF32, 512, 2, true}, OutputDType::kF32, 8, 512});
  all.push_back({"llama3/f32->f32", {128256, 4096, DType::kF32}, OutputDType::kF32, 4, 512});
  all.push_back({"llama3/bf16->bf16", {128256, 4096, DType::kBF16}, OutputDType::kBF16, 4, 512});
  SyntheticSpec gemma{262144, 5376, DType::kBF16};
  gemma.token_scale = 73.5;  // sqrt(5376) rounded to bf16, as the gemma recipe stores it
  all.push_back({"gemma3/bf16->bf16", gemma, OutputDType::kBF16, 4, 512});
  for (std::uint64_t dim : {64, 128, 256, 384}) {
    static std::vector<std::string> names;
    names.push_back("dim" + std::to_string(dim) + "/bf16->bf16");
    all.push_back({names.back().c_str(), {vocab_past_llc(DType::kBF16, dim), dim, DType::kBF16}, OutputDType::kBF16, 8, 1024});
  }
  return all;
}

// One generated model per spec, written once and opened for the whole run (the file is removed
// at once: the mapping keeps it), with the residency asked for.
const embedrt::Model& model_for(const SyntheticSpec& spec, embedrt::Residency residency) {
  static std::map<std::string, embedrt::Model> cache;
  const std::string key = spec.describe() + "/" + std::string(embedrt::residency_name(residency));
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("embedrt-kbench-" + std::to_string(::getpid()) + ".embt")).string();
  if (auto s = embedrt::perf::write_synthetic_model(path, spec); !s) throw std::runtime_error(s.error().message());
  auto model = embedrt::Model::open(path, {.residency = residency});
  std::filesystem::remove(path);
  if (!model) throw std::runtime_error(model.error().message());
  return cache.emplace(key, std::move(*model)).first->second;
}

void size_counters(benchmark::State& state, std::uint64_t table_bytes, std::uint64_t out_bytes) {
  state.counters["table_vs_llc"] = static_cast<double>(table_bytes) / static_cast<double>(llc().bytes);
  state.counters["out_vs_llc"] = static_cast<double>(out_bytes) / static_cast<double>(llc().bytes);
}

// The gather: Args(threads, residency). Ids rotate through enough random batches to touch 4x the
// LLC of rows (perf::id_sets_for): 8 fixed batches of 8192 ids at dim 64 touch 16 MiB, which stays cached.
void BM_Embed(benchmark::State& state, Case c) {
  const int threads = static_cast<int>(state.range(0));
  const auto residency = static_cast<embedrt::Residency>(state.range(1));
  const embedrt::Model& model = model_for(c.spec, residency);
  tbb::task_arena arena(threads);
  auto embedder = embedrt::Embedder::create(model, {.arena = &arena});
  if (!embedder) return state.SkipWithError(embedder.error().message().c_str());
  const std::uint64_t tokens = c.batch * c.seq;
  const std::uint64_t sets = embedrt::perf::id_sets_for(c.spec.vocab, model.token().row_stride, tokens, llc().bytes);
  std::vector<std::vector<std::int64_t>> ids(sets, std::vector<std::int64_t>(tokens));
  std::mt19937_64 rng(7);
  for (auto& set : ids) {
    for (auto& id : set) id = static_cast<std::int64_t>(rng() % c.spec.vocab);
  }
  const std::uint64_t out_bytes = tokens * c.spec.dim * embedrt::output_element_bytes(c.out);
  std::vector<std::byte> out_storage(out_bytes + 64);
  auto* aligned = out_storage.data() + (64 - reinterpret_cast<std::uintptr_t>(out_storage.data()) % 64) % 64;
  const embedrt::OutputSpan out = embedrt::OutputSpan::from_bytes({aligned, out_bytes}, c.out).value();
  std::vector<embedrt::EmbedRequest> requests(ids.size());
  for (std::size_t k = 0; k < ids.size(); ++k) {
    requests[k].ids = ids[k];
    requests[k].sequences = c.batch;
  }
  std::size_t k = 0;
  for (auto _ : state) {
    if (auto s = embedder->embed(requests[k++ % requests.size()], out); !s) return state.SkipWithError(s.error().message().c_str());
    benchmark::ClobberMemory();
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
  state.counters["id_sets"] = static_cast<double>(sets);
  size_counters(state, model.token().bytes.size(), out_bytes);
  const auto memory = embedrt::perf::range_memory(model.token().bytes.data(), model.token().bytes.size());
  state.counters["table_huge_MiB"] = static_cast<double>(memory.anon_huge + memory.file_pmd) / (1 << 20);
}

// The case's roofline: Args(threads).
void BM_Roofline(benchmark::State& state, Case c) {
  const int threads = static_cast<int>(state.range(0));
  tbb::task_arena arena(threads);
  embedrt::perf::StreamCase s;
  s.table = c.spec.dtype;
  s.out = c.out;
  s.dim = c.spec.dim;
  s.tokens = c.batch * c.seq;
  s.min_table_bytes = 4 * llc().bytes;
  s.stream = embedrt::streams_output(embedrt::NonTemporal::kAuto, s.tokens * c.spec.dim * embedrt::output_element_bytes(c.out),
                                     llc().bytes);  // as the Embedder
  embedrt::perf::StreamRoofline roofline(embedrt::default_isa().value(), s);
  for (auto _ : state) roofline.call(arena);
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(s.tokens), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
  size_counters(state, roofline.table_bytes(), roofline.output_bytes());
}

// Single-token decode at dim 768 (GPT-2 f32): Args(cold). Warm: 8 ids that stay cached. Cold: the
// row and the output evicted before each call. Each call is timed on its own (manual time: the
// eviction is not in it, and PauseTiming costs more than the call).
void BM_Decode(benchmark::State& state) {
  const bool cold = state.range(0) != 0;
  const embedrt::Model& model = model_for({50257, 768, DType::kF32, 1024}, embedrt::Residency::kPopulate);
  auto embedder = embedrt::Embedder::create(model);
  if (!embedder) return state.SkipWithError(embedder.error().message().c_str());
  std::vector<std::int64_t> ids = {464, 2068, 7586, 21831, 18045, 625, 262, 16931};
  float out[768];
  embedrt::EmbedRequest request;
  std::size_t k = 0;
  const std::uint64_t row = embedrt::row_bytes(DType::kF32, 768);
  for (auto _ : state) {
    const std::int64_t& id = ids[k++ % ids.size()];
    request.ids = std::span<const std::int64_t>(&id, 1);
    if (cold) {
      embedrt::perf::evict(model.token().row(static_cast<std::uint64_t>(id)), row);
      embedrt::perf::evict(out, sizeof out);
    }
    const auto start = std::chrono::steady_clock::now();
    const auto s = embedder->embed(request, embedrt::OutputSpan(out));
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (!s) return state.SkipWithError(s.error().message().c_str());
    benchmark::ClobberMemory();
  }
  state.SetLabel(cold ? "cold (row and output evicted)" : "warm");
}

// The cold row's physical limit: the row evicted, every line of it prefetched at once, then the add.
void BM_DecodeLimit(benchmark::State& state) {
  const embedrt::Model& model = model_for({50257, 768, DType::kF32, 1024}, embedrt::Residency::kPopulate);
  const auto limit = embedrt::perf::roofline_kernels(embedrt::default_isa().value()).get_decode(DType::kF32, OutputDType::kF32);
  std::vector<std::int64_t> ids = {464, 2068, 7586, 21831, 18045, 625, 262, 16931};
  float out[768];
  std::size_t k = 0;
  const std::uint64_t row = embedrt::row_bytes(DType::kF32, 768);
  for (auto _ : state) {
    const auto* token = model.token().row(static_cast<std::uint64_t>(ids[k++ % ids.size()]));
    embedrt::perf::evict(token, row);
    embedrt::perf::evict(out, sizeof out);
    const auto start = std::chrono::steady_clock::now();
    limit({token, model.position()->row(0), row, 768, 0, reinterpret_cast<std::byte*>(out)});
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    benchmark::ClobberMemory();
  }
  state.SetLabel("cold row, lines prefetched at once, then the add");
}

void register_all() {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const std::vector<int> thread_counts = cores > 1 ? std::vector<int>{1, cores} : std::vector<int>{1};
  for (const Case& c : cases()) {
    auto* embed = benchmark::RegisterBenchmark(("Embed/" + std::string(c.name)).c_str(), BM_Embed, c);
    auto* roof = benchmark::RegisterBenchmark(("Roofline/" + std::string(c.name)).c_str(), BM_Roofline, c);
    for (int t : thread_counts) {
      embed->Args({t, static_cast<int>(embedrt::Residency::kPopulate)});
      roof->Args({t});
    }
    for (auto* b : {embed, roof}) b->UseRealTime()->Unit(benchmark::kMicrosecond);
  }
  // Residency: the same gathers from a copy in huge pages (the largest tables feel the TLB most).
  for (const Case& c : cases()) {
    if (std::string(c.name).rfind("gemma3", 0) != 0 && std::string(c.name).rfind("dim128", 0) != 0) continue;
    benchmark::RegisterBenchmark(("Embed/" + std::string(c.name)).c_str(), BM_Embed, c)
        ->Args({cores, static_cast<int>(embedrt::Residency::kCopy)})
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::RegisterBenchmark("Decode/gpt2-f32", BM_Decode)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kNanosecond);
  benchmark::RegisterBenchmark("DecodeLimit/gpt2-f32", BM_DecodeLimit)->UseManualTime()->Unit(benchmark::kNanosecond);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::AddCustomContext("embedrt.isa", std::string(embedrt::isa_name(embedrt::default_isa().value())));
  std::string isas;
  for (auto isa : embedrt::supported_isas()) isas += (isas.empty() ? "" : ",") + std::string(embedrt::isa_name(isa));
  benchmark::AddCustomContext("embedrt.supported_isas", isas);
  benchmark::AddCustomContext("embedrt.max_threads", std::to_string(tbb::this_task_arena::max_concurrency()));
  benchmark::AddCustomContext("embedrt.llc_bytes", std::to_string(llc().bytes));
  benchmark::AddCustomContext("embedrt.thp", embedrt::perf::transparent_hugepage_mode());
  benchmark::AddCustomContext("embedrt.version", embedrt::version());
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
