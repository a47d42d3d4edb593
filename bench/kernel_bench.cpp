// Google Benchmark programs for the kernels: table dtype x output dtype x dim x batch x threads,
// beside a memory-copy roofline measured in the same run (bytes read + written per second by a
// parallel memcpy of 256 MiB). The JSON context carries the ISA and the thread counts.
//
//   build/release/bench/embedrt_bench_kernels --benchmark_format=json --benchmark_out=k.json
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>
#include <random>

#include "embedrt/embedder.hpp"
#include "embedrt/embedrt.hpp"
#include "embedrt/half.hpp"

namespace {

using embedrt::DType;
using embedrt::OutputDType;

// One synthetic model per (dtype, vocab, dim), written once and mapped for the whole run.
const embedrt::Model& model_for(DType dtype, std::uint64_t vocab, std::uint64_t dim) {
  static std::map<std::tuple<int, std::uint64_t, std::uint64_t>, embedrt::Model> cache;
  const auto key = std::make_tuple(static_cast<int>(dtype), vocab, dim);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("embedrt-kbench-" + std::to_string(::getpid()) + ".embt")).string();
  embedrt::Metadata meta;
  meta.position_kind = embedrt::PositionKind::kLearned;
  auto writer = embedrt::TableFileWriter::begin(
      path, {{"tok", embedrt::Role::kToken, dtype, vocab, dim}, {"pos", embedrt::Role::kPosition, dtype, 1024, dim}},
      meta, {.overwrite = true, .sync = false});
  if (!writer) throw std::runtime_error(writer.error().message());
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (std::size_t t = 0; t < 2; ++t) {
    for (std::uint64_t r = 0; r < writer->spec(t).rows; ++r) {
      auto row = writer->row(t, r);
      for (std::uint64_t j = 0; j < dim; ++j) {
        const float v = normal(rng);
        switch (dtype) {
          case DType::kF32: std::memcpy(row.data() + 4 * j, &v, 4); break;
          case DType::kF16: { const auto h = embedrt::f32_to_f16(v); std::memcpy(row.data() + 2 * j, &h, 2); break; }
          case DType::kBF16: { const auto h = embedrt::f32_to_bf16(v); std::memcpy(row.data() + 2 * j, &h, 2); break; }
          case DType::kInt8Rowwise: row[j] = static_cast<std::byte>(static_cast<std::int8_t>(v * 3000)); break;
        }
      }
      if (dtype == DType::kInt8Rowwise) {
        const float scale = 1.0f / 3000, bias = 0.0f;
        std::memcpy(row.data() + embedrt::int8_params_offset(dim), &scale, 4);
        std::memcpy(row.data() + embedrt::int8_params_offset(dim) + 4, &bias, 4);
      }
    }
  }
  if (auto s = writer->commit(); !s) throw std::runtime_error(s.error().message());
  auto model = embedrt::Model::open(path, {.residency = embedrt::Residency::kPopulate});
  std::filesystem::remove(path);
  if (!model) throw std::runtime_error(model.error().message());
  return cache.emplace(key, std::move(*model)).first->second;
}

// Args: table dtype, output dtype, dim, batch, sequence length, threads, vocab.
void BM_Embed(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  const auto out_dtype = static_cast<OutputDType>(state.range(1));
  const auto dim = static_cast<std::uint64_t>(state.range(2));
  const auto batch = static_cast<std::uint64_t>(state.range(3)), seq = static_cast<std::uint64_t>(state.range(4));
  const int threads = static_cast<int>(state.range(5));
  const auto vocab = static_cast<std::uint64_t>(state.range(6));
  const embedrt::Model& model = model_for(dtype, vocab, dim);
  tbb::task_arena arena(threads);
  auto embedder = embedrt::Embedder::create(model, {.arena = &arena});
  if (!embedder) return state.SkipWithError(embedder.error().message().c_str());
  std::vector<std::int64_t> ids(batch * seq);
  std::mt19937_64 rng(7);
  for (auto& id : ids) id = static_cast<std::int64_t>(rng() % vocab);
  std::vector<std::byte> out_bytes(ids.size() * dim * embedrt::output_element_bytes(out_dtype));
  const embedrt::OutputSpan out = embedrt::OutputSpan::from_bytes(out_bytes, out_dtype).value();
  embedrt::EmbedRequest request;
  request.ids = ids;
  request.sequences = batch;
  for (auto _ : state) {
    if (auto s = embedder->embed(request, out); !s) return state.SkipWithError(s.error().message().c_str());
    benchmark::ClobberMemory();
  }
  const double tokens = static_cast<double>(ids.size());
  const double bytes = tokens * static_cast<double>(embedrt::row_bytes(dtype, dim) + dim * (out_dtype == OutputDType::kF32 ? 4 : 2));
  state.counters["tokens/s"] = benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bytes/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
  state.SetLabel(std::string(embedrt::dtype_name(dtype)) + "->" +
                 (out_dtype == OutputDType::kF32 ? "f32" : out_dtype == OutputDType::kBF16 ? "bf16" : "f16"));
}

void kernel_args(benchmark::internal::Benchmark* b) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const std::vector<int> thread_counts = cores > 1 ? std::vector<int>{1, cores} : std::vector<int>{1};
  for (int threads : thread_counts) {
    // GPT-2 small shape, every table dtype, f32 output; bf16 output for f32 and bf16 tables.
    for (int dtype = 1; dtype <= 4; ++dtype) b->Args({dtype, 0, 768, 8, 1024, threads, 50257});
    b->Args({1, 1, 768, 8, 1024, threads, 50257});
    b->Args({3, 1, 768, 8, 1024, threads, 50257});
    b->Args({1, 2, 768, 8, 1024, threads, 50257});
    // Llama-3 shape (128256 x 4096), 4 x 512, f32 and bf16 tables.
    b->Args({1, 0, 4096, 4, 512, threads, 128256});
    b->Args({3, 0, 4096, 4, 512, threads, 128256});
  }
  // Single-token decode at dim 768 and odd widths, one thread (inline path).
  for (int dim : {768, 769, 4096}) b->Args({1, 0, dim, 1, 1, 1, 50257});
}
BENCHMARK(BM_Embed)->Apply(kernel_args)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The streaming-store choice, measured as it matters: embed, then a consumer reads the whole
// output (as the next layer would). Args: batch of 1024-token GPT-2 sequences, streaming
// (0 never, 1 always). Output sizes run from 3 MiB to 48 MiB around the last-level cache.
void BM_EmbedThenRead(benchmark::State& state) {
  const auto batch = static_cast<std::uint64_t>(state.range(0));
  const bool stream = state.range(1) != 0;
  const embedrt::Model& model = model_for(DType::kF32, 50257, 768);
  auto embedder = embedrt::Embedder::create(
      model, {.nontemporal = stream ? embedrt::NonTemporal::kAlways : embedrt::NonTemporal::kNever});
  if (!embedder) return state.SkipWithError(embedder.error().message().c_str());
  std::vector<std::int64_t> ids(batch * 1024);
  std::mt19937_64 rng(9);
  for (auto& id : ids) id = static_cast<std::int64_t>(rng() % 50257);
  std::vector<float> out(ids.size() * 768);
  embedrt::EmbedRequest request;
  request.ids = ids;
  request.sequences = batch;
  for (auto _ : state) {
    if (auto s = embedder->embed(request, embedrt::OutputSpan(out)); !s) return state.SkipWithError(s.error().message().c_str());
    float sum = 0;
    for (std::size_t i = 0; i < out.size(); i += 16) sum += out[i];  // touch every cache line
    benchmark::DoNotOptimize(sum);
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(ids.size()), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["out_MiB"] = static_cast<double>(out.size() * 4) / (1 << 20);
  state.SetLabel(stream ? "streaming" : "regular");
}
BENCHMARK(BM_EmbedThenRead)->ArgsProduct({{1, 2, 4, 8, 16}, {0, 1}})->UseRealTime()->Unit(benchmark::kMicrosecond);

// The roofline: bytes read + written per second by memcpy of 256 MiB split across threads.
void BM_MemcpyRoofline(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const std::size_t bytes = 256u << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  tbb::task_arena arena(threads);
  for (auto _ : state) {
    arena.execute([&] {
      tbb::parallel_for(0, threads, [&](int t) {
        const std::size_t begin = bytes / threads * t, end = t + 1 == threads ? bytes : bytes / threads * (t + 1);
        std::memcpy(dst.data() + begin, src.data() + begin, end - begin);
      });
    });
    benchmark::ClobberMemory();
  }
  state.counters["bytes/s"] = benchmark::Counter(2.0 * bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
}
BENCHMARK(BM_MemcpyRoofline)->Arg(1)->Arg(static_cast<int>(std::thread::hardware_concurrency()))->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::AddCustomContext("embedrt.isa", std::string(embedrt::isa_name(embedrt::default_isa().value())));
  std::string isas;
  for (auto isa : embedrt::supported_isas()) isas += (isas.empty() ? "" : ",") + std::string(embedrt::isa_name(isa));
  benchmark::AddCustomContext("embedrt.supported_isas", isas);
  benchmark::AddCustomContext("embedrt.max_threads", std::to_string(tbb::this_task_arena::max_concurrency()));
  benchmark::AddCustomContext("embedrt.version", embedrt::version());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
