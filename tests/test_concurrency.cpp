// Many threads embedding through one shared Embedder at once: each result must be exactly what
// the same request gives alone. Run under ThreadSanitizer by `EMBEDRT_SANITIZE=thread ./tools/test.sh`.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <thread>

#include "embedrt/embedder.hpp"
#include "embedrt/embedrt.hpp"
#include "support/temp_dir.hpp"

using namespace embedrt;
using embedrt::test::TempDir;

TEST_CASE("any number of threads may call one Embedder at once") {
  TempDir dir;
  const std::uint64_t vocab = 500, dim = 96, context = 64;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> tok(vocab * dim), pos(context * dim);
  for (float& v : tok) v = normal(rng);
  for (float& v : pos) v = normal(rng);
  const TableData tables[] = {
      {{"tok", Role::kToken, DType::kF32, vocab, dim}, std::as_bytes(std::span(tok))},
      {{"pos", Role::kPosition, DType::kF32, context, dim}, std::as_bytes(std::span(pos))},
  };
  Metadata meta;
  meta.position_kind = PositionKind::kLearned;
  REQUIRE(write_table_file(dir.file("c.embt"), tables, meta));
  auto model = Model::open(dir.file("c.embt"));
  REQUIRE(model);
  // Two Embedders over one Model: one sends its larger requests through the oneTBB arena, the
  // other runs everything on the calling threads (where ThreadSanitizer sees every access).
  auto parallel = Embedder::create(*model, {.inline_bytes = 16 * 1024});
  auto inline_only = Embedder::create(*model, {.inline_bytes = std::size_t{1} << 40});
  REQUIRE(parallel);
  REQUIRE(inline_only);

  struct Job {
    std::vector<std::int64_t> ids;
    std::uint64_t sequences, start;
    std::vector<float> expected;
  };
  std::vector<Job> jobs;
  for (int k = 0; k < 12; ++k) {
    Job job;
    job.sequences = 1 + k % 4;
    const std::uint64_t length = 1 + (k * 7) % 40;
    job.start = static_cast<std::uint64_t>(k) % (context - length);
    for (std::uint64_t i = 0; i < job.sequences * length; ++i) job.ids.push_back(static_cast<std::int64_t>(rng() % vocab));
    job.expected.resize(job.ids.size() * dim);
    REQUIRE(reference_embed(*model, job.ids, job.sequences, job.start, job.expected));
    jobs.push_back(std::move(job));
  }

  constexpr int kThreads = 8, kRounds = 40;
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> out;
      for (int round = 0; round < kRounds; ++round) {
        const Job& job = jobs[static_cast<std::size_t>(t * 5 + round) % jobs.size()];
        out.assign(job.expected.size(), 0.0f);
        EmbedRequest r;
        r.ids = job.ids;
        r.sequences = job.sequences;
        r.start = job.start;
        const Embedder& embedder = (t + round) % 2 ? *parallel : *inline_only;
        const Status s = embedder.embed(r, OutputSpan(out));
        if (!s || std::memcmp(out.data(), job.expected.data(), out.size() * sizeof(float)) != 0) ++failures[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) CHECK(failures[t] == 0);
}
