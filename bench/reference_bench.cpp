// The reference path on a GPT-2-shaped f32 model (50257 x 768, context 1024), beside a memory-copy
// roofline measured in the same run: bytes read + written per second by memcpy of 256 MiB.
// The reference path is the test oracle, not the hot path; this number is the floor the fast
// kernel is measured against.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "embedrt/embedrt.hpp"

namespace {

constexpr std::uint64_t kVocab = 50257, kDim = 768, kContext = 1024;

const embedrt::Model& gpt2_model() {
  static const embedrt::Model model = [] {
    const std::string path =
        (std::filesystem::temp_directory_path() / ("embedrt-bench-" + std::to_string(::getpid()) + ".embt")).string();
    auto writer = embedrt::TableFileWriter::begin(
        path, {{"wte", embedrt::Role::kToken, embedrt::DType::kF32, kVocab, kDim},
               {"wpe", embedrt::Role::kPosition, embedrt::DType::kF32, kContext, kDim}},
        [] {
          embedrt::Metadata m;
          m.family = "gpt2";
          m.context_length = kContext;
          m.position_kind = embedrt::PositionKind::kLearned;
          return m;
        }(),
        {.overwrite = true, .sync = false});
    if (!writer) throw std::runtime_error(writer.error().message());
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (std::size_t t = 0; t < 2; ++t) {
      for (std::uint64_t r = 0; r < writer->spec(t).rows; ++r) {
        for (float& v : writer->row_f32(t, r)) v = normal(rng);
      }
    }
    if (auto s = writer->commit(); !s) throw std::runtime_error(s.error().message());
    auto opened = embedrt::Model::open(path, {.residency = embedrt::Residency::kPopulate});
    std::filesystem::remove(path);  // the mapping keeps it alive
    if (!opened) throw std::runtime_error(opened.error().message());
    return std::move(*opened);
  }();
  return model;
}

void BM_ReferenceEmbed(benchmark::State& state) {
  const embedrt::Model& model = gpt2_model();
  const auto batch = static_cast<std::uint64_t>(state.range(0));
  const auto length = static_cast<std::uint64_t>(state.range(1));
  std::vector<std::int64_t> ids(batch * length);
  std::mt19937 rng(2);
  for (auto& id : ids) id = std::uniform_int_distribution<std::int64_t>(0, kVocab - 1)(rng);
  std::vector<float> out(ids.size() * kDim);
  for (auto _ : state) {
    auto s = embedrt::reference_embed(model, ids, batch, 0, out);
    if (!s) state.SkipWithError(s.error().message().c_str());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(ids.size()), benchmark::Counter::kIsIterationInvariantRate);
  // One table row read and one output row written per token (positions stay in cache).
  state.counters["bytes/s"] = benchmark::Counter(static_cast<double>(ids.size() * kDim * 8),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ReferenceEmbed)->Args({8, 1024})->Args({1, 1})->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_MemcpyRoofline(benchmark::State& state) {
  const std::size_t bytes = 256u << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
  }
  state.counters["bytes/s"] = benchmark::Counter(static_cast<double>(2 * bytes), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MemcpyRoofline)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
