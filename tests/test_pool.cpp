// Bags (FORMAT.md 7.2): Embedder::pool on every ISA x table dtype x output dtype x odd and even
// dims x modes x weights x ragged bags with empty ones, against reference_pool. Without
// normalization the f32 results are bit-identical (the same f32 operations in the same order);
// 16-bit outputs are the reference rounded once; normalized results are bit-identical across ISAs
// and within 8 f32 ulps of the reference (which normalizes in double; the kernels sum the squares
// in f32, in 16 lanes, so their relative error grows with dim / 16: about 4e-7 at dim 769).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <random>

#include "embedrt/embedder.hpp"
#include "embedrt/embedrt.hpp"
#include "embedrt/half.hpp"
#include "support/temp_dir.hpp"

using namespace embedrt;
using embedrt::test::TempDir;

namespace {

struct PoolModel {
  DType dtype = DType::kF32;
  std::uint64_t vocab = 37, dim = 17;
  bool weights_table = false;
  PoolingMode pooling = PoolingMode::kNone;
  bool normalize = false;
  double token_scale = 1.0;
  double output_scale = 1.0;
  // An int32 [1, mapped_ids] ids.map table: id i reads token row (7 * i + 3) % vocab (several ids
  // share a row, as in model2vec's quantized vocabularies); ids outside [0, mapped_ids) read as id 0
  // (FORMAT.md: row 3 here).
  std::uint64_t mapped_ids = 0;
  std::uint64_t ids() const { return mapped_ids != 0 ? mapped_ids : vocab; }
};

std::int32_t mapped_row(std::uint64_t id, std::uint64_t vocab) { return static_cast<std::int32_t>((7 * id + 3) % vocab); }

std::string write_pool_model(TempDir& dir, const PoolModel& s, const std::string& name) {
  std::vector<TableSpec> specs = {{"tok", Role::kToken, s.dtype, s.vocab, s.dim}};
  if (s.weights_table) specs.push_back({"w", Role::kOther, DType::kF32, 1, s.ids()});
  if (s.mapped_ids != 0) specs.push_back({"map", Role::kOther, DType::kInt32, 1, s.mapped_ids});
  Metadata meta;
  meta.pooling = s.pooling;
  meta.normalize = s.normalize;
  meta.token_scale = s.token_scale;
  meta.output_scale = s.output_scale;
  if (s.weights_table) meta.pooling_weights_table = "w";
  if (s.mapped_ids != 0) {
    meta.id_map_table = "map";
    meta.out_of_range = OutOfRangeIds::kRowZero;
  }
  const std::string path = dir.file(name);
  auto writer = TableFileWriter::begin(path, specs, meta, {.overwrite = true, .sync = false});
  REQUIRE(writer);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::size_t t = 0; t < specs.size(); ++t) {
    for (std::uint64_t r = 0; r < specs[t].rows; ++r) {
      const auto row = writer->row(t, r);
      for (std::uint64_t j = 0; j < specs[t].dim; ++j) {
        const float v = normal(rng);
        switch (specs[t].dtype) {
          case DType::kF32: std::memcpy(row.data() + 4 * j, &v, 4); break;
          case DType::kF16: { const auto h = f32_to_f16(v); std::memcpy(row.data() + 2 * j, &h, 2); break; }
          case DType::kBF16: { const auto h = f32_to_bf16(v); std::memcpy(row.data() + 2 * j, &h, 2); break; }
          // (Codes clamped before the conversion: a float outside the integer type is undefined.)
          case DType::kInt8Rowwise: row[j] = static_cast<std::byte>(static_cast<std::int8_t>(std::clamp(v * 40, -127.0f, 127.0f))); break;
          case DType::kInt4Rowwise: row[j / 2] |= static_cast<std::byte>(static_cast<unsigned>(std::clamp(v * 8 + 8, 0.0f, 15.0f)) << (4 * (j % 2))); break;
          case DType::kInt32: {  // the ids.map
            const std::int32_t row_of_id = mapped_row(j, s.vocab);
            std::memcpy(row.data() + 4 * j, &row_of_id, 4);
            break;
          }
        }
      }
      if (specs[t].dtype == DType::kInt8Rowwise) {
        const float scale = 0.01f * static_cast<float>(r % 5 + 1), bias = normal(rng);
        std::memcpy(row.data() + int8_params_offset(s.dim), &scale, 4);
        std::memcpy(row.data() + int8_params_offset(s.dim) + 4, &bias, 4);
      }
      if (specs[t].dtype == DType::kInt4Rowwise) {
        const std::uint16_t scale = f32_to_f16(0.01f * static_cast<float>(r % 5 + 1)), bias = f32_to_f16(normal(rng));
        std::memcpy(row.data() + int4_params_offset(s.dim), &scale, 2);
        std::memcpy(row.data() + int4_params_offset(s.dim) + 2, &bias, 2);
      }
    }
  }
  REQUIRE(writer->commit());
  return path;
}

// Distance in f32 units in the last place.
std::uint32_t ulps(float a, float b) {
  std::int32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  if (x < 0) x = INT32_MIN - x;
  if (y < 0) y = INT32_MIN - y;
  return static_cast<std::uint32_t>(x > y ? x - y : y - x);
}

struct Bags {
  std::string name;
  std::vector<std::int64_t> ids;
  std::vector<std::uint64_t> offsets;
  std::uint64_t bags = 0;
};

std::vector<Bags> bag_sets(std::uint64_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<std::int64_t> id(0, static_cast<std::int64_t>(vocab) - 1);
  std::vector<Bags> all;
  // 9, 12, 14, 24 and 25: wide rows are pooled 8 and 4 at a time, then one by one (bag_body.inl's
  // pool_rows); block passes over bags of more than 12 ids go in tiles of 12 rows (12 + 2, 12 + 12,
  // 12 + 12 + 1), a bag of 12 in one.
  Bags ragged{"ragged 0,3,0,1,9,12,14,24,25,0 (empty first, middle, last)"};
  ragged.offsets = {0};
  for (std::uint64_t size : {0, 3, 0, 1, 9, 12, 14, 24, 25, 0}) {
    for (std::uint64_t k = 0; k < size; ++k) ragged.ids.push_back(id(rng));
    ragged.offsets.push_back(ragged.ids.size());
  }
  ragged.ids[0] = 0, ragged.ids.back() = static_cast<std::int64_t>(vocab) - 1;
  all.push_back(ragged);
  Bags uniform{"uniform 40 bags of 8"};
  uniform.bags = 40;
  for (int k = 0; k < 320; ++k) uniform.ids.push_back(id(rng));
  all.push_back(uniform);
  Bags repeated{"one bag of the same id 5 times"};
  repeated.bags = 1;
  repeated.ids = {4, 4, 4, 4, 4};
  all.push_back(repeated);
  // Each request's ids exactly fill their buffer, so that an id read past them (a range prefetching
  // rows ahead beyond the call's end: PoolArgs::bags) is a heap overflow the ASan build reports.
  for (Bags& set : all) set.ids.shrink_to_fit();
  return all;
}

// Pools into an output `offset` elements past a 64-byte boundary (streaming stores take only
// outputs whose rows all start vector-aligned: streams_bags in bag_body.inl), which ends where its
// allocation does, so that the ASan build reports a store past it.
template <typename T>
std::vector<float> run_pool(const Embedder& e, const BagRequest& r, std::uint64_t count, bool& ok,
                            std::size_t offset = 0) {
  const std::size_t bytes = (offset + count) * sizeof(T);
  const std::unique_ptr<void, void (*)(void*)> buffer(::operator new(bytes, std::align_val_t{64}), [](void* p) {
    ::operator delete(p, std::align_val_t{64});
  });
  const std::span<T> out(static_cast<T*>(buffer.get()) + offset, count);
  std::uninitialized_fill(out.begin(), out.end(), T{});
  ok = static_cast<bool>(e.pool(r, OutputSpan(out)));
  std::vector<float> values(count);
  for (std::uint64_t k = 0; k < count; ++k) {
    if constexpr (std::is_same_v<T, float>) values[k] = out[k];
    else if constexpr (std::is_same_v<T, BFloat16>) values[k] = bf16_to_f32(out[k].bits);
    else values[k] = f16_to_f32(out[k].bits);
  }
  return values;
}

// A request for the bags of `set`.
BagRequest request_for(const Bags& set, std::span<const float> weights, PoolingMode mode, bool normalize) {
  BagRequest r;
  r.ids = set.ids;
  r.offsets = set.offsets;
  r.bags = set.bags;
  r.weights = weights;
  r.mode = mode;
  r.normalize = normalize;
  return r;
}

}  // namespace

TEST_CASE("pool: every ISA, dtype, dim and mode equals the reference") {
  TempDir dir;
  std::mt19937 rng(3);
  int model_index = 0;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kInt8Rowwise, DType::kInt4Rowwise}) {
    // Which path each dim takes (bag_body.inl; SSE4.2 and AVX2 hold 8 vectors of 4 or 8 values,
    // AVX-512 16 of 16):
    //  - 32 (every vector ISA), 24 (AVX2, SSE4.2), 64 (AVX2), 128, 208 and 256 (AVX-512): rows of
    //    whole vectors pooled in registers, the plain path's loop over bags, normalized there too
    //    (24: values past the last multiple of 16, whose squares are added one by one; 16: exactly
    //    the 16 lanes, one value a lane without a vector ISA; 24 and 64 with an output scale, which
    //    applies before the division); rows of more than a line prefetch the row ahead line by line
    //    (interleaves_prefetch), int8 64 with its scale and bias in line two;
    //  - those rows, and 65 (AVX2, AVX-512) and 200 (AVX-512), rows with a tail, in the chunk path
    //    (weighted and 16-bit outputs, normalized or not; a plain normalized request with a tail),
    //    the same prefetch on the first pass;
    //  - 65 (SSE4.2), 128 and 256 (AVX2 and SSE4.2 16-bit and quantized), 300 (AVX2 and SSE4.2
    //    quantized, AVX-512 16-bit and int8), 769 and 1024 (AVX-512 16-bit and int8; AVX2 and SSE4.2
    //    int8, and int4 769): block passes, in tiles of rows but with AVX-512 16-bit rows, which a plain
    //    request pools 30 vectors a pass at 769 (30 + 18) and 1024 (30 + 30 + 4), others 28
    //    (28 + 20, 28 + 28 + 8; the test below);
    //  - 300 with AVX-512 int4: rows pooled from L1 copies of 16 ids at a time (RowStage), which the
    //    ragged set's bag of 14 and the uniform set's bags of 8 cross;
    //  - the rest (f32 rows wider than the registers, AVX2 and SSE4.2 16-bit 769 and 1024, 2100):
    //    pool_rows.
    for (std::uint64_t dim : {1, 7, 16, 17, 24, 32, 64, 65, 128, 200, 208, 256, 300, 769, 1024, 2100}) {
      for (bool weights_table : {false, true}) {
        PoolModel spec{.dtype = dtype, .dim = dim, .weights_table = weights_table,
                       .token_scale = dim == 7 ? 2.5 : 1.0, .output_scale = dim == 24 || dim == 64 ? 0.6 : 1.0};
        auto model = Model::open(write_pool_model(dir, spec, "p" + std::to_string(model_index++) + ".embt"));
        REQUIRE(model);
        for (const Bags& set : bag_sets(spec.vocab, rng)) {
          const std::uint64_t bags = set.offsets.empty() ? set.bags : set.offsets.size() - 1;
          // The same ids as 32-bit values: the kernel has a path for each width.
          std::vector<std::int32_t> ids32(set.ids.size());  // (exactly: bag_sets)
          std::transform(set.ids.begin(), set.ids.end(), ids32.begin(),
                         [](std::int64_t id) { return static_cast<std::int32_t>(id); });
          std::vector<float> request_weights(set.ids.size());
          for (float& w : request_weights) w = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
          for (PoolingMode mode : {PoolingMode::kSum, PoolingMode::kMean, PoolingMode::kMax}) {
            for (bool with_weights : {false, true}) {
              if (mode == PoolingMode::kMax && (with_weights || weights_table)) continue;
              for (bool normalize : {false, true}) {
                CAPTURE(dtype_name(dtype));
                CAPTURE(dim);
                CAPTURE(weights_table);
                CAPTURE(set.name);
                CAPTURE(pooling_mode_name(mode));
                CAPTURE(with_weights);
                CAPTURE(normalize);
                const std::span<const float> weights = with_weights ? std::span<const float>(request_weights)
                                                                    : std::span<const float>();
                std::vector<float> want(bags * dim);
                REQUIRE(reference_pool(*model, 0, set.ids, set.offsets, set.bags, weights, mode, normalize, want));
                // Normalized 16-bit outputs have their own references (the vector is rounded before
                // it is divided by its length), computed once for every ISA and run below.
                std::vector<float> want_bf, want_h;
                if (normalize) {
                  want_bf.resize(bags * dim), want_h.resize(bags * dim);
                  REQUIRE(reference_pool(*model, 0, set.ids, set.offsets, set.bags, weights, mode, normalize, want_bf,
                                         OutputDType::kBF16));
                  REQUIRE(reference_pool(*model, 0, set.ids, set.offsets, set.bags, weights, mode, normalize, want_h,
                                         OutputDType::kF16));
                }
                const BagRequest r = request_for(set, weights, mode, normalize);
                std::vector<float> first_isa;
                // Threaded in ranges or inline; streaming stores or not, into an output aligned to
                // take them or one element past that (they fall back to the cache's stores); rows
                // prefetched into L1, or into L2 (a cache of 0 bytes: every table comes from memory)
                // and rows of up to 1 KiB at least 32 rows ahead, past these calls' ends.
                struct Run {
                  std::size_t inline_bytes;
                  NonTemporal nontemporal;
                  std::size_t offset;
                  PrefetchLevel level = PrefetchLevel::kL1;
                };
                for (Isa isa : supported_isas()) {
                  for (const Run run : {Run{0, NonTemporal::kNever, 0}, Run{0, NonTemporal::kAlways, 0, PrefetchLevel::kL2},
                                        Run{std::size_t{1} << 30, NonTemporal::kAlways, 1}}) {
                    CAPTURE(isa_name(isa));
                    CAPTURE(run.inline_bytes);
                    CAPTURE(static_cast<int>(run.nontemporal));
                    CAPTURE(run.offset);
                    CAPTURE(static_cast<int>(run.level));
                    const std::optional<std::uint64_t> cache =
                        run.level == PrefetchLevel::kL2 ? std::optional<std::uint64_t>(0) : std::nullopt;
                    auto e = Embedder::create(*model, {.isa = isa, .nontemporal = run.nontemporal,
                                                       .inline_bytes = run.inline_bytes, .cache_bytes = cache,
                                                       .prefetch_level = run.level,
                                                       .min_rows_ahead = cache ? std::optional<std::uint64_t>(32)
                                                                               : std::nullopt});
                    REQUIRE(e->min_rows_ahead() == (cache ? 32u : 4u));
                    REQUIRE(e);
                    bool ok = false;
                    const auto got = run_pool<float>(*e, r, bags * dim, ok, run.offset);
                    REQUIRE(ok);
                    BagRequest r32 = r;
                    r32.ids = ids32;
                    const auto got32 = run_pool<float>(*e, r32, bags * dim, ok, run.offset);
                    REQUIRE(ok);
                    REQUIRE(std::memcmp(got32.data(), got.data(), got.size() * 4) == 0);
                    if (!normalize) {
                      REQUIRE(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
                    } else {
                      std::uint32_t worst = 0;
                      for (std::size_t k = 0; k < got.size(); ++k) worst = std::max(worst, ulps(got[k], want[k]));
                      REQUIRE(worst <= 8);
                      if (first_isa.empty()) first_isa = got;
                      REQUIRE(std::memcmp(got.data(), first_isa.data(), got.size() * 4) == 0);
                    }
                    // 16-bit outputs: the f32 result rounded once; normalized, the rounded vector
                    // divided by its length and rounded again (within 1 ulp of the reference's).
                    const auto bf = run_pool<BFloat16>(*e, r, bags * dim, ok, run.offset);
                    REQUIRE(ok);
                    const auto h = run_pool<Float16>(*e, r, bags * dim, ok, run.offset);
                    REQUIRE(ok);
                    std::size_t wrong = 0;
                    if (!normalize) {
                      for (std::size_t k = 0; k < got.size(); ++k) {
                        wrong += bf[k] != bf16_to_f32(f32_to_bf16(got[k]));
                        wrong += h[k] != f16_to_f32(f32_to_f16(got[k]));
                      }
                    } else {
                      for (std::size_t k = 0; k < got.size(); ++k) {
                        const float rb = bf16_to_f32(f32_to_bf16(want_bf[k])), rh = f16_to_f32(f32_to_f16(want_h[k]));
                        wrong += bf[k] != rb && ulps(bf[k], rb) > (1u << 16);
                        wrong += h[k] != rh && std::fabs(h[k] - rh) > std::fabs(rh) * 0x1p-10f + 0x1p-24f;
                      }
                    }
                    REQUIRE(wrong == 0);
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

// An id map, ids outside it read as id 0, and both scales, together: the test above has none of
// them but a token scale at dim 7, so they never met the block passes, their tiles or the threaded
// split there. Pooled and gathered, bit-identical to the reference (no normalization), on every ISA.
TEST_CASE("pool and embed: an id map, ids outside it read as id 0 and both scales, on every path") {
  TempDir dir;
  std::mt19937 rng(5);
  int model_index = 0;
  constexpr std::uint64_t kMappedIds = 53;
  // A ragged set whose bags cross the tiles (12 + 2, 12 + 12 + 1, 12 * 3 + 4) and a uniform one;
  // about one id in ten lies outside the map, negative or past it.
  std::uniform_int_distribution<std::int64_t> id(-4, static_cast<std::int64_t>(kMappedIds) + 3);
  std::vector<Bags> sets(2);
  sets[0].name = "ragged 0,3,1,12,14,25,0,40";
  sets[0].offsets = {0};
  for (std::uint64_t size : {0, 3, 1, 12, 14, 25, 0, 40}) {
    for (std::uint64_t k = 0; k < size; ++k) sets[0].ids.push_back(id(rng));
    sets[0].offsets.push_back(sets[0].ids.size());
  }
  sets[1].name = "uniform 12 bags of 8";
  sets[1].bags = 12;
  for (int k = 0; k < 96; ++k) sets[1].ids.push_back(id(rng));
  for (Bags& set : sets) set.ids.shrink_to_fit();  // exactly the request's ids (bag_sets says why)
  std::size_t outside = 0;
  for (const Bags& set : sets) {
    for (std::int64_t v : set.ids) outside += v < 0 || v >= static_cast<std::int64_t>(kMappedIds);
  }
  REQUIRE(outside >= 10);

  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kInt8Rowwise, DType::kInt4Rowwise}) {
    // The paths of the test above (its list of dims), as the general id path takes them (never the
    // plain path's loop over bags, nor blocks of 30): 7 (tails), 65 (the chunk path; SSE4.2 block
    // passes), 128 and 256 (AVX2 and SSE4.2 block passes but f32; AVX-512 rows that fit the
    // registers), 300 and 769 (AVX-512 block passes, tiled for int8, 16-bit 769 in blocks of 28 +
    // 20; AVX2 and SSE4.2 quantized ones; int4 300 staged), 2100 (pool_rows). With and without a
    // token scale: Bag::with_combine takes a loop of its own for each.
    for (std::uint64_t dim : {7, 65, 128, 256, 300, 769, 2100}) {
      // (Not a structured binding: clang before 16 does not let CAPTURE's lambda name one.)
      for (const std::pair<bool, double>& variant : {std::pair{false, 1.75}, std::pair{true, 1.75}, std::pair{false, 1.0}}) {
        const bool weights_table = variant.first;
        const double token_scale = variant.second;
        PoolModel spec{.dtype = dtype, .dim = dim, .weights_table = weights_table, .token_scale = token_scale,
                       .output_scale = 0.6, .mapped_ids = kMappedIds};
        auto model = Model::open(write_pool_model(dir, spec, "m" + std::to_string(model_index++) + ".embt"));
        REQUIRE(model);
        REQUIRE(model->outputs()[0].vocab_size() == kMappedIds);
        for (const Bags& set : sets) {
          const std::uint64_t bags = set.offsets.empty() ? set.bags : set.offsets.size() - 1;
          std::vector<std::int32_t> ids32(set.ids.begin(), set.ids.end());
          std::vector<float> request_weights(set.ids.size());
          for (float& w : request_weights) w = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
          std::vector<float> want_embed(set.ids.size() * dim);
          REQUIRE(reference_embed(*model, set.ids, 1, 0, want_embed));
          for (PoolingMode mode : {PoolingMode::kSum, PoolingMode::kMean, PoolingMode::kMax}) {
            for (bool with_weights : {false, true}) {
              if (mode == PoolingMode::kMax && (with_weights || weights_table)) continue;
              CAPTURE(dtype_name(dtype));
              CAPTURE(dim);
              CAPTURE(weights_table);
              CAPTURE(token_scale);
              CAPTURE(set.name);
              CAPTURE(pooling_mode_name(mode));
              CAPTURE(with_weights);
              const std::span<const float> weights = with_weights ? std::span<const float>(request_weights)
                                                                  : std::span<const float>();
              std::vector<float> want(bags * dim);
              REQUIRE(reference_pool(*model, 0, set.ids, set.offsets, set.bags, weights, mode, false, want));
              const BagRequest r = request_for(set, weights, mode, false);
              for (Isa isa : supported_isas()) {
                for (std::size_t inline_bytes : {std::size_t{0}, std::size_t{1} << 30}) {
                  CAPTURE(isa_name(isa));
                  CAPTURE(inline_bytes);
                  auto e = Embedder::create(*model, {.isa = isa, .inline_bytes = inline_bytes});
                  REQUIRE(e);
                  bool ok = false;
                  const auto got = run_pool<float>(*e, r, bags * dim, ok);
                  REQUIRE(ok);
                  REQUIRE(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
                  BagRequest r32 = r;
                  r32.ids = ids32;
                  const auto got32 = run_pool<float>(*e, r32, bags * dim, ok);
                  REQUIRE(ok);
                  REQUIRE(std::memcmp(got32.data(), want.data(), got.size() * 4) == 0);
                  if (mode != PoolingMode::kSum || with_weights) continue;
                  // The same ids gathered, one row each (once per model, set, ISA and split).
                  EmbedRequest er;
                  er.ids = set.ids;
                  std::vector<float> rows(set.ids.size() * dim);
                  REQUIRE(e->embed(er, OutputSpan(rows)));
                  REQUIRE(std::memcmp(rows.data(), want_embed.data(), rows.size() * 4) == 0);
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("pool: empty bags give zeros; the model's defaults apply; a zero vector stays zero when normalized") {
  TempDir dir;
  auto model = Model::open(write_pool_model(dir, {.pooling = PoolingMode::kMean, .normalize = true}, "d.embt"));
  REQUIRE(model);
  auto e = Embedder::create(*model);
  REQUIRE(e);
  const std::vector<std::int64_t> ids = {1, 2, 3};
  const std::vector<std::uint64_t> offsets = {0, 0, 3, 3};
  BagRequest r;
  r.ids = ids;
  r.offsets = offsets;
  std::vector<float> out(3 * 17, 9.0f);
  REQUIRE(e->pool(r, OutputSpan(out)));
  for (std::uint64_t j = 0; j < 17; ++j) {
    CHECK(out[j] == 0.0f);
    CHECK(out[2 * 17 + j] == 0.0f);
  }
  // The model says mean + normalize: the middle bag has unit length.
  double squares = 0;
  for (std::uint64_t j = 0; j < 17; ++j) squares += static_cast<double>(out[17 + j]) * out[17 + j];
  CHECK(std::fabs(squares - 1.0) < 1e-6);
  std::vector<float> want(3 * 17);
  REQUIRE(reference_pool(*model, 0, ids, offsets, 0, {}, PoolingMode::kNone, std::nullopt, want));
  for (std::size_t k = 0; k < want.size(); ++k) CHECK(ulps(out[k], want[k]) <= 4);
  // No bags at all.
  BagRequest none;
  none.bags = 0;
  std::vector<float> nothing;
  CHECK(e->pool(none, OutputSpan(nothing)));
}

TEST_CASE("pool: refusals name the field") {
  TempDir dir;
  auto model = Model::open(write_pool_model(dir, {}, "r.embt"));
  REQUIRE(model);
  auto e = Embedder::create(*model);
  REQUIRE(e);
  std::vector<float> out(2 * 17);
  const std::vector<std::int64_t> ids = {1, 2, 99, 4};
  BagRequest r;
  r.ids = ids;
  r.bags = 2;
  const auto message = [&](const BagRequest& request, std::span<float> o) {
    const Status s = e->pool(request, OutputSpan(o));
    REQUIRE_FALSE(s);
    return s.error().message();
  };
  CHECK(message(r, out) == "no pooling `mode` was given and the model sets none (pooling.mode)");
  r.mode = PoolingMode::kSum;
  CHECK(message(r, out) == "bag 1, position 0: id 99 is out of range [0, 37)");
  const std::vector<std::int64_t> good = {1, 2, 3, 4};
  r.ids = good;
  const std::vector<float> weights = {1, 2, 3};
  r.weights = weights;
  CHECK(message(r, out) == "3 weights for 4 ids");
  const std::vector<float> four = {1, 2, 3, 4};
  r.weights = four;
  r.mode = PoolingMode::kMax;
  CHECK(message(r, out) == "weights pool with mode sum or mean, not max");
  r.weights = {};
  r.bags = 3;
  CHECK(message(r, out) == "4 ids cannot be split into 3 bags of equal size");
  r.bags = 2;
  std::vector<float> small(17);
  CHECK(message(r, small) == "output has 17 elements, expected 2 bags x dim 17");
  const std::vector<std::uint64_t> decreasing = {0, 3, 2, 4};
  r.offsets = decreasing;
  std::vector<float> three(3 * 17);
  CHECK(message(r, three) == "offsets decrease at bag 1");
  const std::vector<std::uint64_t> short_end = {0, 3};
  r.offsets = short_end;
  CHECK(message(r, small) == "offsets must hold bags + 1 values from 0 to 4 ids");

  // An output with positions is not a bag of rows.
  const std::vector<float> tok(4 * 3, 1.0f), pos(2 * 3, 1.0f);
  const TableData tables[] = {{{"tok", Role::kToken, DType::kF32, 4, 3}, std::as_bytes(std::span(tok))},
                              {{"pos", Role::kPosition, DType::kF32, 2, 3}, std::as_bytes(std::span(pos))}};
  Metadata meta;
  meta.position_kind = PositionKind::kLearned;
  REQUIRE(write_table_file(dir.file("pos.embt"), tables, meta, {.sync = false}));
  auto positioned = Model::open(dir.file("pos.embt"));
  REQUIRE(positioned);
  auto pe = Embedder::create(*positioned);
  REQUIRE(pe);
  BagRequest p;
  p.ids = good;
  p.mode = PoolingMode::kSum;
  std::vector<float> one(3);
  const Status s = pe->pool(p, OutputSpan(one));
  REQUIRE_FALSE(s);
  CHECK(s.error().code() == ErrorCode::kUnsupported);
  CHECK(s.error().message() == "pooling applies to a token table alone; this output adds positions to each token");
}
