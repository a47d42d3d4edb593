// The fast kernels against the reference path: every ISA this machine runs x every table dtype x
// every output dtype x odd and even dims x batch shapes. f32 output must be bit-identical (the
// arithmetic is the same); 16-bit outputs must equal the reference rounded by the library's own
// tested scalar conversion; LayerNorm within 1e-5.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <type_traits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <oneapi/tbb/task_arena.h>
#include <random>
#include <utility>

#include "embedrt/embedder.hpp"
#include "embedrt/embedrt.hpp"
#include "embedrt/half.hpp"
#include "prefetch_calibration.hpp"
#include "support/temp_dir.hpp"

using namespace embedrt;
using embedrt::test::TempDir;

namespace {

struct Spec {
  DType dtype = DType::kF32;
  std::uint64_t vocab = 37, context = 40, segments = 0, dim = 17;
  std::uint64_t position_offset = 0;
  bool position = true, norm = false;
  double scale = 1.0;
  double token_scale = 1.0;
  std::int64_t padding_id = -1;
};

// Random tables (N(0, 1) as f32, then encoded in the table dtype by the writer's own rules).
Model make_model(TempDir& dir, const Spec& s, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<TableSpec> specs = {{"tok", Role::kToken, s.dtype, s.vocab, s.dim}};
  if (s.segments) specs.push_back({"seg", Role::kSegment, s.dtype, s.segments, s.dim});
  if (s.position) specs.push_back({"pos", Role::kPosition, s.dtype, s.context + s.position_offset, s.dim});
  if (s.norm) {
    specs.push_back({"w", Role::kNormWeight, DType::kF32, 1, s.dim});
    specs.push_back({"b", Role::kNormBias, DType::kF32, 1, s.dim});
  }
  Metadata meta;
  meta.position_kind = s.position ? PositionKind::kLearned : PositionKind::kNone;
  meta.position_offset = s.position_offset;
  meta.output_scale = s.scale;
  meta.token_scale = s.token_scale;
  meta.padding_id = s.padding_id;
  meta.norm_epsilon = 1e-5;
  const std::string path = dir.file("k" + std::to_string(seed) + ".embt");
  auto writer = TableFileWriter::begin(path, specs, meta, {.overwrite = true, .sync = false});
  REQUIRE(writer);
  for (std::size_t t = 0; t < specs.size(); ++t) {
    for (std::uint64_t r = 0; r < specs[t].rows; ++r) {
      const auto row = writer->row(t, r);
      std::vector<float> v(s.dim);
      for (float& x : v) x = normal(rng);
      switch (specs[t].dtype) {
        case DType::kF32: std::memcpy(row.data(), v.data(), 4 * s.dim); break;
        case DType::kF16:
          for (std::uint64_t j = 0; j < s.dim; ++j) { const auto h = f32_to_f16(v[j]); std::memcpy(row.data() + 2 * j, &h, 2); }
          break;
        case DType::kBF16:
          for (std::uint64_t j = 0; j < s.dim; ++j) { const auto h = f32_to_bf16(v[j]); std::memcpy(row.data() + 2 * j, &h, 2); }
          break;
        case DType::kInt8Rowwise: {
          for (std::uint64_t j = 0; j < s.dim; ++j) row[j] = static_cast<std::byte>(static_cast<std::int8_t>(std::uniform_int_distribution<int>(-128, 127)(rng)));
          const float scale = 0.01f * static_cast<float>(r % 7 + 1), bias = normal(rng);
          const std::uint64_t tail = int8_params_offset(s.dim);
          std::memcpy(row.data() + tail, &scale, 4);
          std::memcpy(row.data() + tail + 4, &bias, 4);
          break;
        }
        case DType::kInt4Rowwise: {
          for (std::uint64_t j = 0; j < s.dim; ++j) {
            const auto q = static_cast<unsigned>(std::uniform_int_distribution<int>(0, 15)(rng));
            row[j / 2] |= static_cast<std::byte>(j % 2 ? q << 4 : q);
          }
          const std::uint16_t scale = f32_to_f16(0.01f * static_cast<float>(r % 7 + 1)), bias = f32_to_f16(normal(rng));
          std::memcpy(row.data() + int4_params_offset(s.dim), &scale, 2);
          std::memcpy(row.data() + int4_params_offset(s.dim) + 2, &bias, 2);
          break;
        }
        case DType::kInt32: break;  // (not a value table)
      }
    }
  }
  REQUIRE(writer->commit());
  auto model = Model::open(path);
  REQUIRE(model);
  return std::move(*model);
}

// The reference for ragged batches and explicit positions: one reference call per token.
std::vector<float> reference(const Model& model, const std::vector<std::int64_t>& ids,
                             const std::vector<std::int64_t>& segments, const std::vector<std::uint64_t>& positions) {
  const std::uint64_t dim = model.dim();
  std::vector<float> out(ids.size() * dim);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    std::vector<std::int64_t> seg;
    if (!segments.empty()) seg = {segments[i]};
    REQUIRE(reference_embed(model, std::span(&ids[i], 1), 1, positions[i], std::span(out).subspan(i * dim, dim), seg));
  }
  return out;
}

struct Batch {
  std::string name;
  std::vector<std::int64_t> ids, segments;
  std::vector<std::uint64_t> offsets, starts;
  std::vector<std::int64_t> position_ids;
  std::uint64_t sequences = 1, start = 0;
  std::vector<std::uint64_t> positions;  // the position of each token, for the reference
};

std::vector<Batch> batches(const Spec& s, std::mt19937& rng) {
  std::uniform_int_distribution<std::int64_t> id(0, static_cast<std::int64_t>(s.vocab) - 1);
  std::vector<Batch> all;
  Batch empty{"empty"};
  empty.sequences = 3;
  all.push_back(empty);
  Batch uniform{"uniform 3x7 from 5"};
  uniform.sequences = 3;
  uniform.start = 5;
  for (int i = 0; i < 21; ++i) uniform.ids.push_back(id(rng)), uniform.positions.push_back(5 + i % 7);
  uniform.ids[0] = 0, uniform.ids[20] = static_cast<std::int64_t>(s.vocab) - 1;
  all.push_back(uniform);
  // Uniform sequences sharing their positions are embedded position-major (StepOrder); with
  // inline_bytes 0, dim 768 f32 splits these 185 steps into chunks that start mid-column.
  Batch shared{"uniform 5x37 from 2"};
  shared.sequences = 5;
  shared.start = 2;
  for (int i = 0; i < 185; ++i) shared.ids.push_back(id(rng)), shared.positions.push_back(2 + i % 37);
  all.push_back(shared);
  Batch ragged{"ragged 4,0,9,1 with starts"};
  ragged.sequences = 4;
  ragged.offsets = {0, 4, 4, 13, 14};
  ragged.starts = {0, 3, 30, 39};
  for (std::uint64_t q = 0; q < 4; ++q)
    for (std::uint64_t i = ragged.offsets[q]; i < ragged.offsets[q + 1]; ++i)
      ragged.ids.push_back(id(rng)), ragged.positions.push_back(ragged.starts[q] + i - ragged.offsets[q]);
  all.push_back(ragged);
  Batch explicit_positions{"explicit position ids"};
  for (int i = 0; i < 11; ++i) {
    explicit_positions.ids.push_back(id(rng));
    explicit_positions.position_ids.push_back((i * 13) % static_cast<int>(s.context));
    explicit_positions.positions.push_back(static_cast<std::uint64_t>(explicit_positions.position_ids.back()));
  }
  all.push_back(explicit_positions);
  if (s.segments) {
    for (Batch& b : all) {
      for (std::size_t i = 0; i < b.ids.size(); ++i) b.segments.push_back(static_cast<std::int64_t>(i % s.segments));
    }
  }
  // Each request's ids exactly fill their buffer, so that an id read past them (a range prefetching
  // rows ahead beyond the call's end: KernelArgs::steps) is a heap overflow the ASan build reports.
  for (Batch& b : all) b.ids.shrink_to_fit();
  return all;
}

std::vector<float> decode_output(const std::vector<std::uint16_t>& bits, OutputDType dtype) {
  std::vector<float> out(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) {
    out[i] = dtype == OutputDType::kBF16 ? bf16_to_f32(bits[i]) : f16_to_f32(bits[i]);
  }
  return out;
}

bool same(float a, float b) { return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b)); }

void check_matrix(const Spec& s, std::uint32_t seed, bool int32_ids) {
  TempDir dir;
  const Model model = make_model(dir, s, seed);
  std::mt19937 rng(seed);
  for (const Batch& b : batches(s, rng)) {
    const std::vector<float> want = reference(model, b.ids, b.segments, b.positions);
    // With LayerNorm, how far the kernel's f32 statistics may take an element from the reference's
    // double ones: 1e-5 of its row's largest magnitude (at least 1). The statistics' rounding scales
    // every element of a row alike, so a small element after a large bias gets the row's error
    // (int4 BERT rows here: up to 1.4e-5 of an element near -0.99; at most 2.4e-6 of a row's
    // largest magnitude over this whole test).
    std::vector<float> norm_bound(want.size());
    for (std::size_t row = 0; s.norm && row * s.dim < want.size(); ++row) {
      float largest = 1.0f;
      for (std::size_t j = 0; j < s.dim; ++j) largest = std::max(largest, std::fabs(want[row * s.dim + j]));
      std::fill_n(norm_bound.begin() + static_cast<std::ptrdiff_t>(row * s.dim), s.dim, 1e-5f * largest);
    }
    std::vector<std::int32_t> ids32(b.ids.begin(), b.ids.end());
    EmbedRequest request;
    request.ids = int32_ids ? IdSpan(std::span<const std::int32_t>(ids32)) : IdSpan(std::span<const std::int64_t>(b.ids));
    request.sequences = b.sequences;
    request.sequence_offsets = b.offsets;
    request.start_positions = b.starts;
    request.start = b.start;
    request.position_ids = b.position_ids;
    request.segment_ids = b.segments;
    for (Isa isa : supported_isas()) {
      for (NonTemporal nt : {NonTemporal::kNever, NonTemporal::kAlways}) {
        // inline_bytes 0 sends even these small requests through the parallel path. A cache of 0
        // bytes makes every table one whose rows come from memory: uniform batches with rows of
        // more than 1 KiB go in token order, quantized rows of 6-16 lines are staged (but for int8
        // rows in the AVX-512 kernels that prefetch into L1: stages_rows), and PrefetchLevel::kL2
        // applies (taken with streaming stores, so both levels run: AVX-512 int8 rows staged and
        // from the table, where the build has the L2 sets), and rows of up to 1 KiB are
        // prefetched at least 32 rows ahead (EmbedderOptions::min_rows_ahead).
        for (const auto& [inline_bytes, cache_bytes] : {std::pair<std::size_t, std::optional<std::uint64_t>>{std::size_t{1} << 30, {}},
                                                       {std::size_t{0}, {}}, {std::size_t{0}, 0}}) {
          const PrefetchLevel level = nt == NonTemporal::kAlways ? PrefetchLevel::kL2 : PrefetchLevel::kL1;
          const std::optional<std::uint64_t> rows_ahead = cache_bytes ? std::optional<std::uint64_t>(32) : std::nullopt;
          auto embedder = Embedder::create(model, {.isa = isa, .nontemporal = nt, .inline_bytes = inline_bytes,
                                                   .cache_bytes = cache_bytes, .prefetch_level = level,
                                                   .min_rows_ahead = rows_ahead});
          REQUIRE(embedder);
          REQUIRE(embedder->min_rows_ahead() == (cache_bytes ? 32u : 4u));
          CAPTURE(isa_name(isa));
          CAPTURE(b.name);
          const std::size_t inline_limit = inline_bytes;  // (clang 14's CAPTURE cannot name a structured binding)
          const bool cache_given = cache_bytes.has_value();
          CAPTURE(inline_limit);
          CAPTURE(cache_given);
          std::vector<float> got(want.size(), -99.0f);
          REQUIRE(embedder->embed(request, OutputSpan(got)));
          int mismatches = 0;
          for (std::size_t k = 0; k < want.size(); ++k) {
            const bool ok = s.norm ? std::fabs(got[k] - want[k]) <= norm_bound[k] : same(got[k], want[k]);
            mismatches += !ok;
          }
          CHECK(mismatches == 0);
          if (inline_bytes == 0) continue;  // 16-bit outputs: inline path, streaming on and off
          for (OutputDType od : {OutputDType::kBF16, OutputDType::kF16}) {
            std::vector<std::uint16_t> bits(want.size());
            REQUIRE(embedder->embed(request, OutputSpan::from_bytes(std::as_writable_bytes(std::span(bits)), od).value()));
            const std::vector<float> decoded = decode_output(bits, od);
            int bad = 0;
            for (std::size_t k = 0; k < want.size(); ++k) {
              const float rounded = od == OutputDType::kBF16 ? bf16_to_f32(f32_to_bf16(want[k]))
                                                             : f16_to_f32(f32_to_f16(want[k]));
              // With LayerNorm the f32 value may be off by its bound, and then round to the 16-bit
              // neighbour: one 16-bit ulp more.
              const float ulp = std::fabs(rounded) * (od == OutputDType::kBF16 ? 1.0f / 128 : 1.0f / 1024) + 1e-6f;
              bad += s.norm ? !(std::fabs(decoded[k] - rounded) <= ulp + norm_bound[k]) : !same(decoded[k], rounded);
            }
            CAPTURE(static_cast<int>(od));
            CHECK(bad == 0);
          }
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("kernels match the reference: every ISA x table dtype x output dtype x dim") {
  std::uint32_t seed = 1;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kInt8Rowwise, DType::kInt4Rowwise}) {
    // int8 and int4 rows of dims 1 to 64 are copied into L1 16 tokens at a time first (RowStage).
    for (std::uint64_t dim : {1u, 3u, 8u, 17u, 64u, 768u, 769u, 4096u}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(dim);
      Spec s;
      s.dtype = dtype;
      s.dim = dim;
      check_matrix(s, seed, seed % 2 == 1);
      ++seed;
    }
  }
}

TEST_CASE("model variants: segments, OPT offset, no positions, Gemma scale, LayerNorm") {
  std::uint32_t seed = 100;
  // Each variant's sum has its own loop in the kernel (embed_row's Sum): a row alone, times the token
  // scale, plus the position, or the general one.
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kInt8Rowwise, DType::kInt4Rowwise}) {
    for (std::uint64_t dim : {3u, 768u, 769u}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(dim);
      Spec bert{dtype, 50, 40, 2, dim, 0, true, true, 1.0};
      Spec opt{dtype, 50, 40, 0, dim, 2, true, false, 1.0};
      Spec llama{dtype, 50, 40, 0, dim, 0, false, false, 1.0};
      Spec gemma{dtype, 50, 40, 0, dim, 0, false, false, std::sqrt(static_cast<double>(dim))};
      for (const Spec& s : {bert, opt, llama, gemma}) check_matrix(s, seed++, false);
    }
  }
}

TEST_CASE("Embedder validation names the sequence, position, value and limit, and writes nothing") {
  TempDir dir;
  Spec s;
  s.segments = 2;
  const Model model = make_model(dir, s, 7);
  auto embedder = Embedder::create(model);
  REQUIRE(embedder);
  std::vector<float> out(6 * s.dim, -3.0f);
  const auto untouched = [&] {
    for (float v : out) if (v != -3.0f) return false;
    return true;
  };
  const std::vector<std::int64_t> ids = {1, 2, 3, 4, 5, 6};
  struct Case {
    std::string name;
    EmbedRequest request;
    std::string message;
  };
  std::vector<Case> cases;
  const std::vector<std::int64_t> bad_id = {1, 2, 3, 4, 37, 6}, negative = {1, -2, 3, 4, 5, 6};
  const std::vector<std::int64_t> bad_segment = {0, 1, 0, 2, 0, 1};
  const std::vector<std::uint64_t> starts = {0, 38}, ragged = {0, 1, 6}, bad_ragged = {0, 4, 3};
  const std::vector<std::int64_t> positions = {0, 1, 2, 40, 4, 5};
  std::vector<std::int32_t> ids32 = {1, 2, 3, 4, 5, 99};
  {
    EmbedRequest r; r.ids = bad_id; r.sequences = 2;
    cases.push_back({"id past vocab", r, "sequence 1, position 1: id 37 is out of range [0, 37)"});
  }
  {
    EmbedRequest r; r.ids = negative; r.sequences = 1;
    cases.push_back({"negative id", r, "sequence 0, position 1: id -2 is out of range [0, 37)"});
  }
  {
    EmbedRequest r; r.ids = IdSpan(std::span<const std::int32_t>(ids32)); r.sequences = 3;
    cases.push_back({"int32 id past vocab", r, "sequence 2, position 1: id 99 is out of range [0, 37)"});
  }
  {
    EmbedRequest r; r.ids = ids; r.sequences = 2; r.segment_ids = bad_segment;
    cases.push_back({"segment", r, "sequence 1, position 0: segment 2 is out of range [0, 2)"});
  }
  {
    EmbedRequest r; r.ids = ids; r.sequences = 2; r.start_positions = starts;
    cases.push_back({"start past context", r, "sequence 1, position 2: position 40 is past the limit of 40 positions"});
  }
  {
    EmbedRequest r; r.ids = ids; r.sequences = 1; r.start = UINT64_MAX;
    cases.push_back({"huge start", r, "sequence 0, position 0: position 18446744073709551615 is past the limit of 40 positions"});
  }
  {
    EmbedRequest r; r.ids = ids; r.sequences = 2; r.sequence_offsets = ragged; r.start = 36;
    cases.push_back({"ragged past context", r, "sequence 1, position 4: position 40 is past the limit of 40 positions"});
  }
  {
    EmbedRequest r; r.ids = ids; r.position_ids = positions;
    cases.push_back({"explicit position", r, "sequence 0, position 3: position 40 is out of range [0, 40)"});
  }
  {
    EmbedRequest r; r.ids = ids; r.sequences = 4;
    cases.push_back({"uneven split", r, "6 ids cannot be split into 4 sequences of equal length"});
  }
  {
    EmbedRequest r; r.ids = ids; r.sequences = 2; r.sequence_offsets = bad_ragged;
    cases.push_back({"bad offsets", r, "sequence_offsets must hold sequences + 1 = 3 values from 0 to 6 ids"});
  }
  {
    EmbedRequest r; r.ids = ids; r.sequences = 2; r.start_positions = ragged;
    cases.push_back({"start count", r, "3 start positions for 2 sequences"});
  }
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const Status st = embedder->embed(c.request, OutputSpan(out));
    REQUIRE_FALSE(st);
    CHECK(st.error().message() == c.message);
    CHECK(untouched());
  }
  EmbedRequest r;
  r.ids = ids;
  std::vector<float> small(5);
  const Status st = embedder->embed(r, OutputSpan(small));
  REQUIRE_FALSE(st);
  CHECK(st.error().message() == "output has 5 elements, expected 6 ids x dim 17");
}

TEST_CASE("ISA selection: what the build left out (EMBEDRT_ISAS=host) is never offered, and EMBEDRT_ISA says why") {
  CHECK(isa_built(Isa::kScalar));
  const char* saved = std::getenv("EMBEDRT_ISA");
  const std::string restore = saved == nullptr ? "" : saved;
  for (Isa isa : kAllIsas) {
    CAPTURE(isa_name(isa));
    if (!isa_built(isa)) CHECK_FALSE(isa_supported(isa));
    const std::vector<Isa> supported = supported_isas();
    CHECK((std::find(supported.begin(), supported.end(), isa) != supported.end()) == isa_supported(isa));
    REQUIRE(::setenv("EMBEDRT_ISA", std::string(isa_name(isa)).c_str(), 1) == 0);
    const Result<Isa> chosen = default_isa();
    if (isa_supported(isa)) {
      REQUIRE(chosen);
      CHECK(*chosen == isa);
    } else {
      REQUIRE_FALSE(chosen);
      const std::string why = isa_built(isa) ? ": this CPU/OS does not support it" : ": this library was built without it";
      CHECK(chosen.error().message() == "EMBEDRT_ISA=" + std::string(isa_name(isa)) + why + " (supported: " + supported_list() + ")");
    }
  }
  REQUIRE(::setenv("EMBEDRT_ISA", restore.c_str(), 1) == 0);
  if (saved == nullptr) ::unsetenv("EMBEDRT_ISA");
}

TEST_CASE("ISA selection: forced through the API; unsupported and mixed-dtype models refused") {
  TempDir dir;
  const Model model = make_model(dir, Spec{}, 9);
  for (Isa isa : kAllIsas) {
    auto e = Embedder::create(model, {.isa = isa});
    if (isa_supported(isa)) {
      REQUIRE(e);
      CHECK(e->isa() == isa);
    } else {
      REQUIRE_FALSE(e);
      const char* why = isa_built(isa) ? " is not supported by this CPU/OS" : " is not built into this library";
      CHECK(e.error().message() == "ISA " + std::string(isa_name(isa)) + why);
    }
  }
  CHECK(supported_isas().front() == Isa::kScalar);
  CHECK(parse_isa("avx2") == Isa::kAvx2);
  CHECK_FALSE(parse_isa("avx3").has_value());
  std::vector<float> tok(4 * 2), pos(4 * 2);
  std::vector<std::uint16_t> pos16(4 * 2);
  const TableData tables[] = {
      {{"tok", Role::kToken, DType::kF32, 4, 2}, std::as_bytes(std::span(tok))},
      {{"pos", Role::kPosition, DType::kF16, 4, 2}, std::as_bytes(std::span(pos16))},
  };
  Metadata meta;
  meta.position_kind = PositionKind::kLearned;
  REQUIRE(write_table_file(dir.file("mixed.embt"), tables, meta));
  auto mixed = Model::open(dir.file("mixed.embt"));
  REQUIRE(mixed);
  auto e = Embedder::create(*mixed);
  REQUIRE_FALSE(e);
  CHECK(e.error().message().find("the position table 'pos' is f16 but its token table 'tok' is f32") != std::string::npos);
}

TEST_CASE("prefetch level: resolved per output at create from the level asked, the table's size and the ISA") {
  TempDir dir;
  const Model model = make_model(dir, Spec{}, 12);  // a few KiB: its rows never come from memory
  for (Isa isa : supported_isas()) {
    CAPTURE(isa_name(isa));
    const bool has_l2_kernels =
        EMBEDRT_PREFETCH_L2_KERNELS && (isa == Isa::kAvx2 || isa == Isa::kAvx512 || isa == Isa::kAvx512Bf16);
    const PrefetchCalibration& calibration = prefetch_calibration(isa);
    CHECK(&calibration == &prefetch_calibration(isa));  // measured once per process
    if (has_l2_kernels) {
      // Measured: rates from real passes over a table of 4x the LLC within [64, 256] MiB, and the
      // choice the stated 5% margin makes of them.
      CHECK(calibration.note.empty());
      CHECK(calibration.l1_gbs > 0);
      CHECK(calibration.l2_gbs > 0);
      CHECK(calibration.table_bytes >= (std::uint64_t{64} << 20));
      CHECK(calibration.table_bytes <= (std::uint64_t{256} << 20));
      CHECK(calibration.level == (calibration.l2_gbs >= 1.05 * calibration.l1_gbs ? PrefetchLevel::kL2 : PrefetchLevel::kL1));
      CHECK(calibration.near_gbs > 0);
      CHECK(calibration.far_gbs > 0);
      CHECK(calibration.min_rows_ahead == (calibration.far_gbs >= 1.05 * calibration.near_gbs ? 32u : 4u));
    } else {
      CHECK(calibration.level == PrefetchLevel::kL1);
      CHECK(calibration.note.find("no kernels that prefetch into L2") != std::string::npos);
      CHECK(calibration.l1_gbs == 0);
      CHECK(calibration.min_rows_ahead == 4);
    }
    const auto level_of = [&](PrefetchLevel asked, std::optional<std::uint64_t> cache_bytes) {
      auto e = Embedder::create(model, {.isa = isa, .cache_bytes = cache_bytes, .prefetch_level = asked});
      REQUIRE(e);
      CHECK(e->prefetch_level(1) == PrefetchLevel::kL1);  // past the model's one output
      CHECK(e->min_rows_ahead(1) == 4);
      // The distance follows the calibration exactly where the level does.
      const bool calibrated = asked == PrefetchLevel::kAuto && cache_bytes == std::uint64_t{0};
      CHECK(e->min_rows_ahead() == (calibrated ? calibration.min_rows_ahead : 4u));
      return e->prefetch_level();
    };
    // The table in the cache: L1 whatever was asked.
    for (PrefetchLevel asked : {PrefetchLevel::kL1, PrefetchLevel::kL2, PrefetchLevel::kAuto}) {
      CHECK(level_of(asked, std::nullopt) == PrefetchLevel::kL1);
    }
    // Rows from memory (a cache of 0 bytes): as asked where the ISA has L2 kernels, auto as calibrated.
    CHECK(level_of(PrefetchLevel::kL1, 0) == PrefetchLevel::kL1);
    CHECK(level_of(PrefetchLevel::kL2, 0) == (has_l2_kernels ? PrefetchLevel::kL2 : PrefetchLevel::kL1));
    CHECK(level_of(PrefetchLevel::kAuto, 0) == calibration.level);
    // An explicit distance applies to rows from memory whatever the level; outside [4, 256] refused.
    for (PrefetchLevel asked : {PrefetchLevel::kL1, PrefetchLevel::kAuto}) {
      auto far = Embedder::create(model, {.isa = isa, .cache_bytes = 0, .prefetch_level = asked, .min_rows_ahead = 32});
      REQUIRE(far);
      CHECK(far->min_rows_ahead() == 32);
      auto cached = Embedder::create(model, {.isa = isa, .prefetch_level = asked, .min_rows_ahead = 32});
      REQUIRE(cached);
      CHECK(cached->min_rows_ahead() == 4);
    }
    for (std::uint64_t bad : {0, 3, 257}) {
      auto refused = Embedder::create(model, {.isa = isa, .min_rows_ahead = bad});
      REQUIRE_FALSE(refused);
      CHECK(refused.error().code() == ErrorCode::kInvalidArgument);
      CHECK(refused.error().message().find("min_rows_ahead " + std::to_string(bad)) != std::string::npos);
    }
  }
  CHECK(EmbedderOptions{}.prefetch_level == PrefetchLevel::kAuto);
  CHECK(prefetch_level_name(PrefetchLevel::kAuto) == "auto");
  CHECK(prefetch_level_name(PrefetchLevel::kL2) == "l2");
  for (PrefetchLevel level : {PrefetchLevel::kAuto, PrefetchLevel::kL1, PrefetchLevel::kL2}) {
    CHECK(parse_prefetch_level(prefetch_level_name(level)) == level);
  }
  CHECK_FALSE(parse_prefetch_level("L1"));
  CHECK_FALSE(parse_prefetch_level(""));
  for (NonTemporal mode : {NonTemporal::kAuto, NonTemporal::kAlways, NonTemporal::kNever}) {
    CHECK(parse_nontemporal(nontemporal_name(mode)) == mode);
  }
  CHECK(nontemporal_name(NonTemporal::kAlways) == "always");
  CHECK_FALSE(parse_nontemporal("sometimes"));
  // kAuto streams an output larger than half the cache; the others say what they mean.
  constexpr std::uint64_t kLlc = 32u << 20;
  CHECK_FALSE(streams_output(NonTemporal::kAuto, kLlc / 2, kLlc));
  CHECK(streams_output(NonTemporal::kAuto, kLlc / 2 + 1, kLlc));
  CHECK(streams_output(NonTemporal::kAlways, 64, kLlc));
  CHECK_FALSE(streams_output(NonTemporal::kNever, 4 * kLlc, kLlc));
}

// (Not run under qemu's Nehalem: tests/CMakeLists.txt.)
TEST_CASE("prefetch calibration: the measurement runs with any two kernels, in either page size") {
  // The scalar kernels as both levels, so that sanitized builds, which leave the L2 kernels out,
  // run it too: rates from real passes, the rules applied.
  const kernels::RangeKernel scalar = kernels::scalar_kernels().get(DType::kF32, OutputDType::kF32);
  const kernels::BagKernel scalar_bags = kernels::scalar_kernels().get_bag(DType::kF32, OutputDType::kF32);
  for (const bool huge_pages : {false, true}) {
    const PrefetchCalibration c = detail::measure_prefetch_levels(huge_pages, scalar, scalar, scalar_bags, scalar_bags);
    CHECK(c.note.empty());
    CHECK(c.l1_gbs > 0);
    CHECK(c.l2_gbs > 0);
    CHECK(c.level == (c.l2_gbs >= 1.05 * c.l1_gbs ? PrefetchLevel::kL2 : PrefetchLevel::kL1));
    CHECK(c.near_gbs > 0);
    CHECK(c.far_gbs > 0);
    CHECK(c.min_rows_ahead == (c.far_gbs >= 1.05 * c.near_gbs ? 32u : 4u));
  }
}

TEST_CASE("a caller-provided task arena is used") {
  TempDir dir;
  Spec s;
  s.dim = 768;
  s.vocab = 1000;
  const Model model = make_model(dir, s, 11);
  tbb::task_arena arena(1);
  auto embedder = Embedder::create(model, {.arena = &arena, .inline_bytes = 0});
  REQUIRE(embedder);
  std::vector<std::int64_t> ids(512);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i * 7 % 1000);
  EmbedRequest r;
  r.ids = ids;
  r.sequences = 16;
  std::vector<float> got(ids.size() * 768), want(got.size());
  REQUIRE(embedder->embed(r, OutputSpan(got)));
  REQUIRE(reference_embed(model, ids, 16, 0, want));
  CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
}

// RoBERTa-style positions, computed here from their definition (transformers'
// create_position_ids_from_input_ids): pads take row padding_id, every other token
// padding_id + 1 + start + the non-pads before it. Chunks of the parallel path start mid-sequence,
// so dim 4096 (8 tokens per chunk) makes chunk boundaries fall inside sequences with pads.
TEST_CASE("padding-aware positions and a token scale before the additions, every ISA, inline and parallel") {
  std::uint32_t seed = 300;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (std::uint64_t dim : {5u, 4096u}) for (bool norm : {true, false}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(dim);
      CAPTURE(norm);
      TempDir dir;
      Spec s{dtype, 40, 30, 2, dim, 2, true, norm, 1.0};
      s.padding_id = 1;
      s.token_scale = 2.75;  // BART-like: scaled token row, then segment and position, then LayerNorm
      const Model model = make_model(dir, s, seed++);
      // Ragged: [pad in the middle, pads at the end], [], [all pads], [no pads, started at 7].
      const std::vector<std::int64_t> ids = {5, 1, 9, 39, 0, 1, 1, 1, 1, 1, 3, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22};
      const std::vector<std::uint64_t> offsets = {0, 7, 7, 10, 21}, starts = {0, 0, 4, 7};
      std::vector<std::int64_t> segments(ids.size());
      for (std::size_t i = 0; i < ids.size(); ++i) segments[i] = static_cast<std::int64_t>(i % 2);
      std::vector<float> want(ids.size() * dim);
      for (std::uint64_t q = 0; q + 1 < offsets.size(); ++q) {
        std::uint64_t nonpad = 0;
        for (std::uint64_t i = offsets[q]; i < offsets[q + 1]; ++i) {
          // One reference call per token: a lone pad takes the pad row whatever its start.
          const std::int64_t seg = segments[i];
          REQUIRE(reference_embed(model, std::span(&ids[i], 1), 1, starts[q] + nonpad,
                                  std::span(want).subspan(i * dim, dim), std::span(&seg, 1)));
          if (ids[i] != s.padding_id) ++nonpad;
        }
      }
      EmbedRequest request;
      request.ids = ids;
      request.sequences = 4;
      request.sequence_offsets = offsets;
      request.start_positions = starts;
      request.segment_ids = segments;
      for (Isa isa : supported_isas()) {
        for (std::size_t inline_bytes : {std::size_t{1} << 30, std::size_t{0}}) {
          auto embedder = Embedder::create(model, {.isa = isa, .inline_bytes = inline_bytes});
          REQUIRE(embedder);
          CAPTURE(isa_name(isa));
          CAPTURE(inline_bytes);
          std::vector<float> got(want.size());
          REQUIRE(embedder->embed(request, OutputSpan(got)));
          int bad = 0;
          for (std::size_t k = 0; k < want.size(); ++k) {
            bad += norm ? !(std::fabs(got[k] - want[k]) <= 1e-5f * std::max(1.0f, std::fabs(want[k]))) : !same(got[k], want[k]);
          }
          CHECK(bad == 0);
        }
      }
      // The position limit counts non-pads only: 28 non-pads from start 2 fill 30 positions exactly,
      // and one more is refused naming the first position past the limit.
      std::vector<std::int64_t> full(40, 1);
      for (std::size_t i = 0; i < 28; ++i) full[i * 40 / 28] = 7;
      std::vector<float> out(full.size() * dim);
      auto embedder = Embedder::create(model);
      REQUIRE(embedder);
      EmbedRequest fits;
      fits.ids = full;
      fits.start = 2;
      CHECK(embedder->embed(fits, OutputSpan(out)));
      fits.start = 3;
      const Status past = embedder->embed(fits, OutputSpan(out));
      REQUIRE_FALSE(past);
      CHECK(past.error().message().find("position 30 is past the limit of 30 positions") != std::string::npos);
    }
  }
}

TEST_CASE("a padding id needs a position table with an offset of at least 1") {
  TempDir dir;
  std::vector<float> tok(4 * 2), pos(4 * 2);
  const TableData tables[] = {
      {{"tok", Role::kToken, DType::kF32, 4, 2}, std::as_bytes(std::span(tok))},
      {{"pos", Role::kPosition, DType::kF32, 4, 2}, std::as_bytes(std::span(pos))},
  };
  Metadata meta;
  meta.position_kind = PositionKind::kLearned;
  meta.padding_id = 1;
  REQUIRE(write_table_file(dir.file("pad.embt"), tables, meta));
  auto model = Model::open(dir.file("pad.embt"));
  REQUIRE_FALSE(model);
  CHECK(model.error().message().find("position.padding_id 1 needs a position table and a position.offset of at least 1") !=
        std::string::npos);
}

// A fleet of servers on mixed CPUs must return identical numbers: LayerNorm statistics are summed
// in one order on every ISA (kernel_body.inl, lane_ordered_sum), so every output bit matches the
// scalar path's.
TEST_CASE("LayerNorm results are bit-identical on every ISA") {
  std::uint32_t seed = 500;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kInt8Rowwise, DType::kInt4Rowwise}) {
    for (std::uint64_t dim : {5u, 16u, 17u, 768u, 769u, 1031u}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(dim);
      TempDir dir;
      Spec s{dtype, 60, 20, 2, dim, 0, true, true, 1.0};
      const Model model = make_model(dir, s, seed++);
      std::vector<std::int64_t> ids(24), segments(24);
      for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>((i * 37) % 60), segments[i] = i % 2;
      EmbedRequest r;
      r.ids = ids;
      r.sequences = 3;
      r.segment_ids = segments;
      std::vector<float> scalar_f32(ids.size() * dim);
      std::vector<BFloat16> scalar_bf16(ids.size() * dim);
      auto scalar = Embedder::create(model, {.isa = Isa::kScalar});
      REQUIRE(scalar);
      REQUIRE(scalar->embed(r, OutputSpan(scalar_f32)));
      REQUIRE(scalar->embed(r, OutputSpan(scalar_bf16)));
      for (Isa isa : supported_isas()) {
        CAPTURE(isa_name(isa));
        auto e = Embedder::create(model, {.isa = isa, .inline_bytes = isa == Isa::kAvx2 ? 0u : std::size_t{1} << 30});
        REQUIRE(e);
        std::vector<float> f32(scalar_f32.size());
        std::vector<BFloat16> bf16(scalar_bf16.size());
        REQUIRE(e->embed(r, OutputSpan(f32)));
        REQUIRE(e->embed(r, OutputSpan(bf16)));
        CHECK(std::memcmp(f32.data(), scalar_f32.data(), f32.size() * 4) == 0);
        CHECK(std::memcmp(bf16.data(), scalar_bf16.data(), bf16.size() * 2) == 0);
      }
    }
  }
}

TEST_CASE("errors carry structured context; a failed Result's value() is a defined failure") {
  TempDir dir;
  Spec s;
  s.segments = 2;
  const Model model = make_model(dir, s, 21);
  auto embedder = Embedder::create(model);
  REQUIRE(embedder);
  std::vector<float> out(4 * s.dim);
  const std::vector<std::int64_t> ids = {1, 2, 99, 3}, segments = {0, 1, 0, 5};
  const std::vector<std::uint64_t> starts = {0, 39};
  EmbedRequest r;
  r.ids = ids;
  r.sequences = 2;
  Status st = embedder->embed(r, OutputSpan(out));
  REQUIRE_FALSE(st);
  CHECK(st.error().context().field == "ids");
  CHECK(st.error().context().sequence == 1);
  CHECK(st.error().context().position == 0);
  const std::vector<std::int64_t> good = {1, 2, 3, 4};
  r.ids = good;
  r.segment_ids = segments;
  st = embedder->embed(r, OutputSpan(out));
  REQUIRE_FALSE(st);
  CHECK(st.error().context().field == "segment_ids");
  r.segment_ids = {};
  r.start_positions = starts;
  st = embedder->embed(r, OutputSpan(out));
  REQUIRE_FALSE(st);
  CHECK(st.error().context().field == "start_positions");
  CHECK(st.error().context().position == 1);

  Result<int> failed = Error(ErrorCode::kNotFound, "no such thing");
  CHECK_THROWS_AS(failed.value(), BadResultAccess);
  CHECK_THROWS_WITH(failed.value(), "embedrt: value() of a failed Result: no such thing");
  Result<int> fine = 3;
  CHECK_THROWS_AS(fine.error(), BadResultAccess);
  CHECK_THROWS_AS(Status{}.error(), BadResultAccess);
  // A Status holds its error behind a pointer; copies are deep, moves leave the source empty-handed.
  const Status bad = Error(ErrorCode::kOutOfRange, "id 9 is past the table", {.field = "ids"});
  Status copy = bad;
  CHECK_FALSE(copy);
  CHECK(copy.error().message() == bad.error().message());
  CHECK(&copy.error() != &bad.error());
  copy = Status{};
  CHECK(copy);
  CHECK_FALSE(bad);
  Status moved = std::move(Status(bad));
  CHECK(moved.error().context().field == "ids");
}

TEST_CASE("output spans: the element type is the dtype; raw bytes are checked") {
  TempDir dir;
  const std::uint64_t vocab = 8, dim = 4;
  std::vector<float> tok(vocab * dim, 1.5f);
  const TableData tables[] = {{{"tok", Role::kToken, DType::kF32, vocab, dim}, std::as_bytes(std::span(tok))}};
  REQUIRE(write_table_file(dir.file("o.embt"), tables, Metadata{}));
  auto model = Model::open(dir.file("o.embt"));
  REQUIRE(model);
  auto embedder = Embedder::create(*model);
  REQUIRE(embedder);
  std::vector<std::int64_t> ids = {1, 2, 3};
  EmbedRequest r;
  r.ids = ids;
  // A 16-bit buffer's bytes passed as float32: half the elements the request needs, refused
  // before anything is written (this was a heap overflow when a span<uint16_t> took any dtype).
  std::vector<std::uint16_t> bits(ids.size() * dim, 0x1234);
  auto as_f32 = OutputSpan::from_bytes(std::as_writable_bytes(std::span(bits)), OutputDType::kF32);
  REQUIRE(as_f32);
  CHECK(as_f32->size() == bits.size() / 2);
  const Status s = embedder->embed(r, *as_f32);
  REQUIRE_FALSE(s);
  CHECK(s.error().context().field == "output");
  CHECK(std::all_of(bits.begin(), bits.end(), [](std::uint16_t b) { return b == 0x1234; }));
  // Not a whole number of elements; a dtype value outside the enum.
  CHECK_FALSE(OutputSpan::from_bytes(std::as_writable_bytes(std::span(bits)).first(5), OutputDType::kF32));
  const auto bogus = static_cast<OutputDType>(7);
  const auto refused = OutputSpan::from_bytes(std::as_writable_bytes(std::span(bits)), bogus);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message().find("output dtype value 7") != std::string::npos);
  CHECK(output_element_bytes(bogus) == 0);
  // Typed spans carry their dtype.
  std::vector<BFloat16> b16(ids.size() * dim);
  std::vector<Float16> f16(ids.size() * dim);
  CHECK(OutputSpan(b16).dtype() == OutputDType::kBF16);
  CHECK(OutputSpan(f16).dtype() == OutputDType::kF16);
  REQUIRE(embedder->embed(r, OutputSpan(b16)));
  REQUIRE(embedder->embed(r, OutputSpan(f16)));
  CHECK(bf16_to_f32(b16[5].bits) == 1.5f);
  CHECK(f16_to_f32(f16[5].bits) == 1.5f);
  static_assert(!std::is_constructible_v<OutputSpan, std::span<std::uint16_t>>);
}

TEST_CASE("f32 rows into bf16: ties to even, overflow, NaN payloads and subnormals, every ISA, streaming or not") {
  // Each value with the bf16 bits torch's rounding gives it (worked by hand). The subnormals tell
  // the avx512bf16 kernels' VCVTNEPS2BF16, which reads them as zero, from the rounding they must
  // match: the vector holding one has to be stored the long way.
  struct Rounding {
    std::uint32_t f32;
    std::uint16_t bf16;
  };
  const Rounding specials[] = {
      {0x3f808000, 0x3f80},  // a tie, rounded to the even 0x3f80
      {0x3f818000, 0x3f82},  // a tie, rounded to the even 0x3f82
      {0x3f80c000, 0x3f81},  // past the tie
      {0x7f7fffff, 0x7f80},  // the largest float rounds to infinity
      {0xff800000, 0xff80},  // -infinity
      {0x80000000, 0x8000},  // -0
      {0x7f800001, 0x7fc0},  // a signalling NaN, quieted
      {0xff811111, 0xffc1},  // its sign and payload kept
      {0x00018000, 0x0002},  // subnormal, a tie rounded to the even 0x0002 (zero if read as zero)
      {0x007fffff, 0x0080},  // the largest subnormal rounds to the smallest normal
      {0x80400000, 0x8040},  // a negative subnormal, exact
  };
  constexpr std::size_t kSpecials = sizeof(specials) / sizeof(specials[0]);
  for (const Rounding& r : specials) CHECK(f32_to_bf16(std::bit_cast<float>(r.f32)) == r.bf16);  // the reference agrees
  TempDir dir;
  const std::uint64_t vocab = 7, dim = 37;  // odd: rows start at every element offset of a vector
  std::vector<std::uint32_t> table(vocab * dim);
  std::vector<std::uint16_t> rounded(vocab * dim);
  std::mt19937 rng(11);
  for (std::size_t k = 0; k < table.size(); ++k) {
    // Every other element special; the rest random normal floats, rounded by the scalar reference.
    if (k % 2 == 0) {
      table[k] = specials[k / 2 % kSpecials].f32;
      rounded[k] = specials[k / 2 % kSpecials].bf16;
    } else {
      table[k] = (static_cast<std::uint32_t>(rng()) & 0x80ffffffu) | (static_cast<std::uint32_t>(1 + k % 250) << 23);
      rounded[k] = f32_to_bf16(std::bit_cast<float>(table[k]));
    }
  }
  const TableData tables[] = {{{"tok", Role::kToken, DType::kF32, vocab, dim}, std::as_bytes(std::span(table))}};
  REQUIRE(write_table_file(dir.file("round.embt"), tables, Metadata{}));
  auto model = Model::open(dir.file("round.embt"));
  REQUIRE(model);
  std::vector<std::int64_t> ids;
  for (int k = 0; k < 40; ++k) ids.push_back(static_cast<std::int64_t>((k * 5 + k / 7) % vocab));
  for (Isa isa : supported_isas()) {
    for (NonTemporal nt : {NonTemporal::kNever, NonTemporal::kAlways}) {
      CAPTURE(isa_name(isa));
      CAPTURE(static_cast<int>(nt));
      auto embedder = Embedder::create(*model, {.isa = isa, .nontemporal = nt});
      REQUIRE(embedder);
      EmbedRequest r;
      r.ids = ids;
      // One element past a 64-byte boundary, so streaming stores must peel to reach alignment.
      std::vector<std::uint16_t> storage(ids.size() * dim + 64);
      auto* base = reinterpret_cast<std::byte*>(storage.data());
      std::byte* first = base + (64 - reinterpret_cast<std::uintptr_t>(base) % 64) % 64 + 2;
      const auto bytes = std::span<std::byte>(first, ids.size() * dim * 2);
      REQUIRE(embedder->embed(r, OutputSpan::from_bytes(bytes, OutputDType::kBF16).value()));
      std::size_t wrong = 0;
      for (std::size_t t = 0; t < ids.size(); ++t) {
        for (std::size_t j = 0; j < dim; ++j) {
          std::uint16_t got;
          std::memcpy(&got, first + 2 * (t * dim + j), 2);
          const std::size_t k = static_cast<std::size_t>(ids[t]) * dim + j;
          if (got != rounded[k] && ++wrong <= 3) {
            char line[96];
            std::snprintf(line, sizeof line, "token %zu element %zu: f32 0x%08x gave 0x%04x, expected 0x%04x", t, j,
                          static_cast<unsigned>(table[k]), static_cast<unsigned>(got), static_cast<unsigned>(rounded[k]));
            MESSAGE(line);
          }
        }
      }
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("tables into their own dtype: the table's bits, NaN payloads included, every ISA, streaming or not") {
  // torch's gather copies a row; so does the kernel when nothing is added or scaled. Rounding a
  // 16-bit value through f32 would quiet a signalling NaN (0x7f81 -> 0x7fc1); an f32 row must not
  // go through any arithmetic either.
  struct Case {
    DType dtype;
    OutputDType out;
    std::size_t width;  // bytes per element
    std::vector<std::uint32_t> specials;
  };
  const Case cases[] = {
      {DType::kBF16, OutputDType::kBF16, 2, {0x7f81, 0xffc1, 0x7f80, 0xff80, 0x8000, 0x0001, 0x807f, 0x3f80}},
      {DType::kF16, OutputDType::kF16, 2, {0x7c01, 0xfe01, 0x7c00, 0xfc00, 0x8000, 0x0001, 0x83ff, 0x3c00}},
      {DType::kF32, OutputDType::kF32, 4,
       {0x7f800001, 0xffc00001, 0x7f800000, 0xff800000, 0x80000000, 0x00000001, 0x807fffff, 0x3f800000}},
  };
  TempDir dir;
  const std::uint64_t vocab = 5, dim = 37;  // odd: rows start at every element offset of a vector
  for (const Case& c : cases) {
    CAPTURE(dtype_name(c.dtype));
    std::vector<std::byte> table(vocab * dim * c.width);
    std::mt19937 rng(7);
    for (std::size_t k = 0; k < vocab * dim; ++k) {
      const std::uint32_t bits = k % 3 == 0 ? c.specials[k % c.specials.size()] : static_cast<std::uint32_t>(rng());
      std::memcpy(table.data() + k * c.width, &bits, c.width);  // little-endian: the low bytes
    }
    const TableData tables[] = {{{"tok", Role::kToken, c.dtype, vocab, dim}, table}};
    const std::string path = dir.file(std::string(dtype_name(c.dtype)) + "-copy.embt");
    REQUIRE(write_table_file(path, tables, Metadata{}));
    auto model = Model::open(path);
    REQUIRE(model);
    std::vector<std::int64_t> ids;
    for (int k = 0; k < 64; ++k) ids.push_back(static_cast<std::int64_t>((k * 3 + k / 7) % vocab));
    const std::vector<std::int32_t> ids32(ids.begin(), ids.end());
    const std::size_t row = dim * c.width;
    for (Isa isa : supported_isas()) {
      for (NonTemporal nt : {NonTemporal::kNever, NonTemporal::kAlways}) {
        for (bool wide_ids : {true, false}) {  // the kernel has a loop for each id width
          EmbedRequest r;
          r.ids = wide_ids ? IdSpan(std::span<const std::int64_t>(ids)) : IdSpan(std::span<const std::int32_t>(ids32));
          CAPTURE(isa_name(isa));
          CAPTURE(static_cast<int>(nt));
          CAPTURE(wide_ids);
          auto embedder = Embedder::create(*model, {.isa = isa, .nontemporal = nt});
          REQUIRE(embedder);
          // One element past a 64-byte boundary, so streaming stores must peel to reach alignment.
          std::vector<std::uint32_t> storage((ids.size() * row + 128) / 4);
          auto* base = reinterpret_cast<std::byte*>(storage.data());
          std::byte* first = base + (64 - reinterpret_cast<std::uintptr_t>(base) % 64) % 64 + c.width;
          const auto bytes = std::span<std::byte>(first, ids.size() * row);
          REQUIRE(embedder->embed(r, OutputSpan::from_bytes(bytes, c.out).value()));
          std::size_t wrong = 0;
          for (std::size_t t = 0; t < ids.size(); ++t) {
            wrong += std::memcmp(first + t * row, table.data() + static_cast<std::size_t>(ids[t]) * row, row) != 0;
          }
          CHECK(wrong == 0);
        }
      }
    }
  }
}
