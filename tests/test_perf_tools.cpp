// The measurement support behind `embedrt bench` and bench/ (tools/perf): a roofline that did not
// do the case's work would flatter every kernel measured against it, so its output is checked
// against the Embedder's, bit for bit, on every ISA this CPU runs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "embedrt/embedder.hpp"
#include "embedrt/embedrt.hpp"
#include "machine.hpp"
#include "roofline.hpp"
#include "roofline_kernels.hpp"
#include "support/temp_dir.hpp"
#include "synthetic_model.hpp"

using namespace embedrt;
using embedrt::test::TempDir;

namespace {

constexpr DType kDTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kInt8Rowwise, DType::kInt4Rowwise};
constexpr OutputDType kOutputs[] = {OutputDType::kF32, OutputDType::kBF16, OutputDType::kF16};

Model open_synthetic(const TempDir& dir, const perf::SyntheticSpec& spec) {
  const std::string path = dir.file("s.embt");
  REQUIRE(perf::write_synthetic_model(path, spec));
  auto model = Model::open(path);
  REQUIRE(model);
  return std::move(*model);
}

// What the Embedder writes for `ids` on `isa`.
std::vector<std::byte> embedded(const Model& model, Isa isa, OutputDType out, std::vector<std::int64_t> ids, bool stream) {
  auto embedder = Embedder::create(model, {.isa = isa, .nontemporal = stream ? NonTemporal::kAlways : NonTemporal::kNever});
  REQUIRE(embedder);
  std::vector<std::byte> bytes(ids.size() * model.dim() * output_element_bytes(out));
  EmbedRequest request;
  request.ids = ids;
  REQUIRE(embedder->embed(request, OutputSpan::from_bytes(bytes, out).value()));
  return bytes;
}

// Every prefetch distance the roofline tries, into L1 and into L2.
std::vector<std::pair<std::uint64_t, PrefetchLevel>> prefetch_ways() {
  std::vector<std::pair<std::uint64_t, PrefetchLevel>> ways;
  for (std::uint64_t ahead : perf::kPrefetchAheadBytes) {
    for (PrefetchLevel level : {PrefetchLevel::kL1, PrefetchLevel::kL2}) ways.emplace_back(ahead, level);
  }
  return ways;
}

}  // namespace

TEST_CASE("roofline units that prefetch into L2: beside the L1 ones where the library has L2 kernels") {
  for (Isa isa : supported_isas()) {
    CAPTURE(isa_name(isa));
    const bool separate = &perf::roofline_kernels(isa, PrefetchLevel::kL2) != &perf::roofline_kernels(isa);
    CHECK(separate == perf::has_prefetch_l2_roofline(isa));
    CHECK(perf::has_prefetch_l2_roofline(isa) ==
          (EMBEDRT_PREFETCH_L2_KERNELS && (isa == Isa::kAvx2 || isa == Isa::kAvx512 || isa == Isa::kAvx512Bf16)));
    CHECK(&perf::roofline_kernels(isa, PrefetchLevel::kAuto) == &perf::roofline_kernels(isa));
  }
}

TEST_CASE("roofline streams: the Embedder's bytes for rows 0..n-1, every ISA, dtype and output dtype") {
  TempDir dir;
  for (DType dtype : kDTypes) {
    for (std::uint64_t dim : {37, 64, 768}) {  // a tail on every ISA; whole vectors; GPT-2's width
      const Model model = open_synthetic(dir, {41, dim, dtype});
      std::vector<std::int64_t> ids(41);
      for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i);
      for (Isa isa : supported_isas()) {
        for (OutputDType out : kOutputs) {
          for (bool stream : {false, true}) {
            CAPTURE(dtype_name(dtype));
            CAPTURE(dim);
            CAPTURE(isa_name(isa));
            CAPTURE(output_dtype_name(out));
            CAPTURE(stream);
            const auto expected = embedded(model, isa, out, ids, stream);
            // Prefetching the rows ahead (past the table's end, near it), into L1 or L2, changes no value.
            for (const auto& way : prefetch_ways()) {  // (clang 14's CAPTURE cannot name a structured binding)
              const std::uint64_t ahead = way.first;
              const PrefetchLevel level = way.second;
              CAPTURE(ahead);
              CAPTURE(prefetch_level_name(level));
              std::vector<std::byte> got(expected.size() + 64);
              std::byte* aligned = got.data() + (64 - reinterpret_cast<std::uintptr_t>(got.data()) % 64) % 64;
              perf::RowStream a;
              a.table = model.token().bytes.data();
              a.stride = model.token().row_stride;
              a.dim = dim;
              a.params_offset = row_params_offset(dtype, dim);
              a.out = aligned;
              a.stream = stream;
              a.prefetch_ahead = ahead;
              const auto kernel = perf::roofline_kernels(isa, level).get_stream(dtype, out);
              kernel(a, 0, 20);  // in two ranges, as threads split a call
              kernel(a, 20, 41);
              CHECK(std::memcmp(aligned, expected.data(), expected.size()) == 0);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("decode limit: the Embedder's bytes for one token plus its position row") {
  TempDir dir;
  for (DType dtype : kDTypes) {
    const Model model = open_synthetic(dir, {100, 77, dtype, 16});
    for (Isa isa : supported_isas()) {
      for (OutputDType out : kOutputs) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(isa_name(isa));
        CAPTURE(output_dtype_name(out));
        const auto expected = embedded(model, isa, out, {42}, false);
        std::vector<std::byte> got(expected.size());
        perf::roofline_kernels(isa).get_decode(dtype, out)(
            {model.token().row(42), model.position()->row(0), row_bytes(dtype, 77), 77, row_params_offset(dtype, 77), got.data()});
        CHECK(got == expected);
      }
    }
  }
}

TEST_CASE("bag roofline: each bag of consecutive rows pooled as Embedder::pool pools them, every ISA, dtype and plan") {
  TempDir dir;
  for (DType dtype : kDTypes) {
    // 300: wider than the accumulator registers on every ISA, so the plans differ; 600: wider than
    // a column tile's block on every ISA too
    for (std::uint64_t dim : {37, 64, 300, 600}) {
      const Model model = open_synthetic(dir, {48, dim, dtype});
      std::vector<std::int64_t> ids(48);
      for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i);
      for (Isa isa : supported_isas()) {
        auto embedder = Embedder::create(model, {.isa = isa});
        REQUIRE(embedder);
        for (OutputDType out : {OutputDType::kF32, OutputDType::kBF16}) {
          for (PoolingMode mode : {PoolingMode::kSum, PoolingMode::kMean}) {
            for (std::uint64_t bag : {1, 4, 12, 16}) {  // 12: a group of 8 rows and 4 more
              CAPTURE(dtype_name(dtype));
              CAPTURE(dim);
              CAPTURE(isa_name(isa));
              CAPTURE(output_dtype_name(out));
              CAPTURE(pooling_mode_name(mode));
              CAPTURE(bag);
              const std::uint64_t bags = 48 / bag;
              std::vector<std::byte> expected(bags * dim * output_element_bytes(out));
              BagRequest request;
              request.ids = ids;
              request.bags = bags;
              request.mode = mode;
              REQUIRE(embedder->pool(request, OutputSpan::from_bytes(expected, out).value()));
              for (perf::BagPlan plan : perf::kBagPlans) {
                for (const auto& [stream, ahead, level] :
                     {std::tuple<bool, std::uint64_t, PrefetchLevel>{false, 0, PrefetchLevel::kL1},
                      {true, 0, PrefetchLevel::kL1}, {false, 4096, PrefetchLevel::kL1}, {true, 8192, PrefetchLevel::kL1},
                      {false, 4096, PrefetchLevel::kL2}, {true, 8192, PrefetchLevel::kL2}}) {
                  const bool streams = stream;  // (clang 14's CAPTURE cannot name a structured binding)
                  const std::uint64_t prefetch_ahead = ahead;
                  const std::string_view prefetch_level = prefetch_level_name(level);
                  CAPTURE(perf::bag_plan_name(plan));
                  CAPTURE(streams);
                  CAPTURE(prefetch_ahead);
                  CAPTURE(prefetch_level);
                  // 64-byte aligned, as the Embedder's outputs are (convert_row aligns a stream's head anyway)
                  std::vector<std::byte> got(expected.size() + 64);
                  std::byte* aligned = got.data() + (64 - reinterpret_cast<std::uintptr_t>(got.data()) % 64) % 64;
                  std::vector<float> scratch(dim);
                  perf::BagStream a;
                  a.rows.table = model.token().bytes.data();
                  a.rows.stride = model.token().row_stride;
                  a.rows.dim = dim;
                  a.rows.params_offset = row_params_offset(dtype, dim);
                  a.rows.out = aligned;
                  a.rows.stream = stream;
                  a.rows.prefetch_ahead = ahead;
                  a.bag = bag;
                  a.mean = mode == PoolingMode::kMean;
                  a.plan = plan;
                  a.scratch = scratch.data();
                  const auto kernel = perf::roofline_kernels(isa, level).get_bag(dtype, out);
                  REQUIRE((kernel != nullptr));
                  kernel(a, 0, bags / 2);  // in two ranges, as threads split a call
                  kernel(a, bags / 2, bags);
                  CHECK(std::equal(expected.begin(), expected.end(), aligned));
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("roofline kernels: none for an id map's int32") {
  for (Isa isa : supported_isas()) {
    CHECK((perf::roofline_kernels(isa).get_stream(DType::kInt32, OutputDType::kF32) == nullptr));
    CHECK((perf::roofline_kernels(isa).get_bag(DType::kInt32, OutputDType::kF32) == nullptr));
    CHECK((perf::roofline_kernels(isa).get_decode(DType::kInt4Rowwise, OutputDType::kF16) != nullptr));
  }
  perf::StreamCase c;
  c.table = DType::kInt32;
  CHECK_THROWS_AS(perf::StreamRoofline(default_isa().value(), c), std::invalid_argument);
}

TEST_CASE("StreamRoofline with bags: every row in, one row per bag out, counted per call") {
  perf::StreamCase c;
  c.table = DType::kInt4Rowwise;
  c.out = OutputDType::kBF16;
  c.dim = 256;
  c.tokens = 4096;
  c.bag = 32;
  c.min_table_bytes = 1 << 20;
  perf::StreamRoofline roofline(default_isa().value(), c);
  const std::uint64_t row = int4_params_offset(256) + 4;  // 128 bytes of codes, f16 scale and bias
  CHECK(row_bytes(DType::kInt4Rowwise, 256) == row);
  CHECK(roofline.output_bytes() == 4096 / 32 * 256 * 2);
  CHECK(roofline.bytes_per_call() == 4096 * row + 4096 / 32 * 256 * 2);
  tbb::task_arena arena(2);
  for (int k = 0; k < 10; ++k) roofline.call(arena);
  c.tokens = 100;  // not a multiple of the bag
  CHECK_THROWS_AS(perf::StreamRoofline(default_isa().value(), c), std::invalid_argument);
}

TEST_CASE("synthetic models with a second output, and Gemma 3n's shapes and scales") {
  TempDir dir;
  perf::SyntheticSpec spec{1000, 48, DType::kBF16};
  spec.extra.vocab = 500;
  spec.extra.dim = 64;
  spec.extra.token_scale = 16.0;
  spec.extra.shape = {2, 32};
  spec.extra.out_of_range = OutOfRangeIds::kRowZero;
  const Model model = open_synthetic(dir, spec);
  REQUIRE(model.outputs().size() == 2);
  const OutputInfo& second = model.outputs()[1];
  CHECK(second.name == "per_layer_inputs");
  CHECK(second.token->rows == 500);
  CHECK(second.dim() == 64);
  CHECK(second.rules->token_scale == 16.0);
  CHECK(second.rules->out_of_range == OutOfRangeIds::kRowZero);
  CHECK(second.token_shape == std::vector<std::uint64_t>{2, 32});
  CHECK(model.file().verify());
  CHECK(perf::matches(model, spec));
  perf::SyntheticSpec other = spec;
  other.extra.dim = 32;
  CHECK_FALSE(perf::matches(model, other));
  other.extra.vocab = 0;
  CHECK_FALSE(perf::matches(model, other));

  perf::SyntheticSpec e2b, e4b;
  REQUIRE(perf::gemma3n_spec("e2b", e2b));
  REQUIRE(perf::gemma3n_spec("e4b", e4b));
  CHECK(e2b.vocab == 262400);
  CHECK(e2b.dim == 2048);
  CHECK(e2b.dtype == DType::kBF16);
  CHECK(e2b.token_scale == 45.25);  // sqrt(2048) = 45.254... in bf16
  CHECK(e2b.extra.vocab == 262144);
  CHECK(e2b.extra.dim == 30 * 256);
  CHECK(e2b.extra.token_scale == 16.0);
  CHECK(e2b.extra.out_of_range == OutOfRangeIds::kRowZero);
  CHECK(e4b.dim == 2560);
  CHECK(e4b.token_scale == 50.5);  // sqrt(2560) = 50.596... in bf16
  CHECK(e4b.extra.dim == 35 * 256);
  perf::SyntheticSpec bad;
  const Status refused = perf::gemma3n_spec("e3b", bad);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message().find("e3b") != std::string::npos);
}

TEST_CASE("StreamRoofline: buffers past the asked size, a call per batch, bytes per token as counted") {
  perf::StreamCase c;
  c.table = DType::kBF16;
  c.out = OutputDType::kF32;
  c.dim = 64;
  c.tokens = 1000;
  c.out_sets = 3;
  c.min_table_bytes = 1 << 20;
  perf::StreamRoofline roofline(default_isa().value(), c);
  CHECK(roofline.table_bytes() >= (1u << 20));
  CHECK(roofline.table_bytes() % (1000 * default_row_stride(DType::kBF16, 64)) == 0);
  CHECK(roofline.output_bytes() == 1000 * 64 * 4);
  CHECK(roofline.bytes_per_token() == 64 * 2 + 64 * 4);
  tbb::task_arena arena(2);
  for (int k = 0; k < 10; ++k) roofline.call(arena);  // wraps around the table and the outputs
}

TEST_CASE("synthetic models: the shape asked for, and a reused file that differs is refused") {
  TempDir dir;
  perf::SyntheticSpec spec{1000, 48, DType::kBF16, 32, 2, true};
  spec.token_scale = 7.0;
  const Model model = open_synthetic(dir, spec);
  CHECK(model.vocab_size() == 1000);
  CHECK(model.dim() == 48);
  CHECK(model.token().dtype == DType::kBF16);
  CHECK(model.position()->rows == 32);
  CHECK(model.segment()->rows == 2);
  CHECK(model.norm_weight() != nullptr);
  CHECK(model.metadata().token_scale == 7.0);
  CHECK(model.file().verify());
  CHECK(perf::matches(model, spec));
  perf::SyntheticSpec other = spec;
  other.dim = 64;
  const Status differs = perf::matches(model, other);
  REQUIRE_FALSE(differs);
  CHECK(differs.error().message().find("1000x48") != std::string::npos);

  perf::SyntheticSpec parsed;
  CHECK(perf::parse_shape("262144x5376", parsed));
  CHECK(parsed.vocab == 262144);
  CHECK(parsed.dim == 5376);
  for (const char* bad : {"", "x", "10x", "x10", "10x0", "0x10", "10*10", "10x10x10", "-1x5"}) {
    CAPTURE(bad);
    CHECK_FALSE(perf::parse_shape(bad, parsed));
  }
}

TEST_CASE("machine: a last-level cache, and the memory of a mapping as /proc reports it") {
  const perf::CacheInfo llc = perf::last_level_cache();
  CHECK(llc.bytes >= (256u << 10));
  CHECK_FALSE(llc.source.empty());
  CHECK_FALSE(perf::transparent_hugepage_mode().empty());
  std::vector<std::byte> block(8 << 20, std::byte{1});
  const auto use = perf::range_memory(block.data(), block.size());
  CHECK(use.known);
  CHECK(use.rss >= (4u << 20));
  CHECK(perf::process_memory().rss >= use.rss);
  perf::evict(block.data(), 4096);  // no effect on the values
  CHECK(block[100] == std::byte{1});
}
