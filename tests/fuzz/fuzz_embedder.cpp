// libFuzzer target, differential: a random small model and a random request (ids in and out of
// range, equal-length or ragged batches, starts, explicit positions, segments, every output
// dtype) through the public Embedder on every ISA this machine runs, on both its inline and its
// parallel path, against the reference path (embedrt/reference.hpp); then the same ids as bags
// (Embedder::pool against reference_pool: random boundaries with empty bags, sum/mean/max,
// weights, normalization). Traps on any difference in
// the accept/reject decision, the error code, or a value beyond the promised bound:
//   - every ISA and path gives the same bits as the scalar Embedder;
//   - without LayerNorm, f32 output equals the reference bit for bit, and 16-bit output is the
//     reference rounded once; with LayerNorm, within 1e-5 relative plus 8 float ulps of the row's
//     largest value times 1/sqrt(var + eps) times the weight (norm_bounds below), and one
//     16-bit ulp more for 16-bit outputs.
#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "embedrt/embedder.hpp"
#include "embedrt/embedrt.hpp"
#include "embedrt/half.hpp"
#include "embedrt/isa.hpp"

using namespace embedrt;

namespace {

std::string g_case;  // the model and request being tried, for the failure message

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_embedder: %s\n  case: %s\n", what.c_str(), g_case.c_str());
  __builtin_trap();
}

bool same(float a, float b) { return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b)); }

// A model from the fuzz input, written to a per-process file, and, when it has a LayerNorm, the
// same model without it (the oracle's view of the row before normalization, for the bound);
// nullopt when the writer or the reader refuses the combination (their business, not this target's).
struct Models {
  Model model;
  std::optional<Model> without_norm;
};

std::optional<Models> make_models(FuzzedDataProvider& in) {
  static const DType kDTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kInt8Rowwise, DType::kInt4Rowwise};
  const DType dtype = in.PickValueInArray(kDTypes);
  const std::uint64_t vocab = in.ConsumeIntegralInRange<std::uint64_t>(1, 48);
  const std::uint64_t dim = in.ConsumeIntegralInRange<std::uint64_t>(1, 70);
  const bool position = in.ConsumeBool();
  const std::uint64_t context = in.ConsumeIntegralInRange<std::uint64_t>(1, 40);
  const std::uint64_t offset = position ? in.ConsumeIntegralInRange<std::uint64_t>(0, 2) : 0;
  const std::uint64_t segments = in.ConsumeIntegralInRange<std::uint64_t>(0, 3);
  const bool norm = in.ConsumeBool();
  Metadata meta;
  meta.position_kind = position ? PositionKind::kLearned : PositionKind::kNone;
  meta.position_offset = offset;
  static const double kScales[] = {1.0, 0.5, 2.0, 27.712812921102035};
  meta.output_scale = in.PickValueInArray(kScales);
  meta.token_scale = in.PickValueInArray(kScales);
  meta.norm_epsilon = 1e-5;
  if (position && offset >= 1 && in.ConsumeBool()) meta.padding_id = in.ConsumeIntegralInRange<std::int64_t>(0, static_cast<std::int64_t>(vocab) - 1);

  std::vector<TableSpec> specs = {{"tok", Role::kToken, dtype, vocab, dim}};
  if (segments) specs.push_back({"seg", Role::kSegment, dtype, segments, dim});
  if (position) specs.push_back({"pos", Role::kPosition, dtype, context + offset, dim});
  if (norm) {
    specs.push_back({"w", Role::kNormWeight, DType::kF32, 1, dim});
    specs.push_back({"b", Role::kNormBias, DType::kF32, 1, dim});
  }
  // Every row's bytes, drawn once and written to both files.
  std::vector<std::vector<std::byte>> rows;
  for (const TableSpec& spec : specs) {
    for (std::uint64_t r = 0; r < spec.rows; ++r) {
      std::vector<std::byte> row(row_bytes(spec.dtype, dim));
      for (std::uint64_t j = 0; j < dim; ++j) {
        // Small values in steps of 1/16: sums stay far from overflow, NaN never appears.
        const float v = static_cast<float>(in.ConsumeIntegral<std::int8_t>()) / 16.0f;
        switch (spec.dtype) {
          case DType::kF32: std::memcpy(row.data() + 4 * j, &v, 4); break;
          case DType::kF16: { const auto h = f32_to_f16(v); std::memcpy(row.data() + 2 * j, &h, 2); break; }
          case DType::kBF16: { const auto h = f32_to_bf16(v); std::memcpy(row.data() + 2 * j, &h, 2); break; }
          case DType::kInt8Rowwise: row[j] = static_cast<std::byte>(in.ConsumeIntegral<std::int8_t>()); break;
          case DType::kInt4Rowwise:
            row[j / 2] |= static_cast<std::byte>(in.ConsumeIntegralInRange<unsigned>(0, 15) << (4 * (j % 2)));
            break;
          case DType::kInt32: break;  // (not a value table)
        }
      }
      if (spec.dtype == DType::kInt8Rowwise) {
        const float scale = static_cast<float>(in.ConsumeIntegralInRange<int>(1, 64)) / 256.0f;
        const float bias = static_cast<float>(in.ConsumeIntegral<std::int8_t>()) / 32.0f;
        std::memcpy(row.data() + int8_params_offset(dim), &scale, 4);
        std::memcpy(row.data() + int8_params_offset(dim) + 4, &bias, 4);
      }
      if (spec.dtype == DType::kInt4Rowwise) {
        const std::uint16_t scale = f32_to_f16(static_cast<float>(in.ConsumeIntegralInRange<int>(1, 64)) / 256.0f);
        const std::uint16_t bias = f32_to_f16(static_cast<float>(in.ConsumeIntegral<std::int8_t>()) / 32.0f);
        std::memcpy(row.data() + int4_params_offset(dim), &scale, 2);
        std::memcpy(row.data() + int4_params_offset(dim) + 2, &bias, 2);
      }
      rows.push_back(std::move(row));
    }
  }
  const auto write = [&](const std::string& path, std::size_t tables) -> std::optional<Model> {
    auto writer = TableFileWriter::begin(path, std::vector<TableSpec>(specs.begin(), specs.begin() + tables), meta,
                                         {.overwrite = true, .sync = false});
    if (!writer) return std::nullopt;
    std::size_t k = 0;
    for (std::size_t t = 0; t < tables; ++t) {
      for (std::uint64_t r = 0; r < specs[t].rows; ++r, ++k) std::memcpy(writer->row(t, r).data(), rows[k].data(), rows[k].size());
    }
    if (!writer->commit()) return std::nullopt;
    auto model = Model::open(path);
    // The mapping keeps the file's bytes: the name goes now, so that nothing is left in /tmp
    // however the fuzzer ends (libFuzzer exits without running destructors).
    ::unlink(path.c_str());
    if (!model) return std::nullopt;
    return std::move(*model);
  };
  static const std::string path = "/tmp/fuzz_embedder_" + std::to_string(::getpid());
  auto model = write(path + ".embt", specs.size());
  if (!model) return std::nullopt;
  Models models{std::move(*model), std::nullopt};
  if (norm) {
    models.without_norm = write(path + "-raw.embt", specs.size() - 2);
    if (!models.without_norm) fail("the model without its LayerNorm tables was refused");
  }
  return models;
}

// The bound on a LayerNorm output: 1e-5 relative, plus what a different summation order can
// move (x - mean) by, a few float ulps of the row's largest |x|, amplified by 1 / sqrt(var + eps)
// and the weight. (A row of nearly equal values is ill-conditioned: its outputs legitimately
// differ by far more than 1e-5 between two correct implementations.)
std::vector<float> norm_bounds(const Model& model, const std::vector<float>& raw, const std::vector<float>& want) {
  const std::uint64_t dim = model.dim();
  std::vector<float> weight(dim);
  decode_row(*model.norm_weight(), 0, weight);
  std::vector<float> bound(want.size());
  for (std::size_t row = 0; row * dim < raw.size(); ++row) {
    double mean = 0, largest = 0;
    for (std::uint64_t j = 0; j < dim; ++j) {
      mean += raw[row * dim + j];
      largest = std::max(largest, std::fabs(static_cast<double>(raw[row * dim + j])));
    }
    mean /= static_cast<double>(dim);
    double variance = 0;
    for (std::uint64_t j = 0; j < dim; ++j) variance += (raw[row * dim + j] - mean) * (raw[row * dim + j] - mean);
    variance /= static_cast<double>(dim);
    const double amplify = 1.0 / std::sqrt(variance + model.metadata().norm_epsilon);
    for (std::uint64_t j = 0; j < dim; ++j) {
      const std::size_t k = row * dim + j;
      bound[k] = static_cast<float>(1e-5 * std::max(1.0, std::fabs(static_cast<double>(want[k]))) +
                                    8.0 * 0x1p-23 * largest * amplify * std::fabs(static_cast<double>(weight[j])));
    }
  }
  return bound;
}

std::int64_t pick_id(FuzzedDataProvider& in, std::uint64_t limit) {
  switch (in.ConsumeIntegralInRange<int>(0, 15)) {
    case 0: return -1;
    case 1: return static_cast<std::int64_t>(limit);
    case 2: return INT64_MAX;
    case 3: return INT64_MIN;
    default: return in.ConsumeIntegralInRange<std::int64_t>(0, static_cast<std::int64_t>(limit) - 1);
  }
}

// What the reference computes for the request, or its error code.
struct Expected {
  std::optional<ErrorCode> error;
  std::string message;
  std::vector<float> out;
};

Expected reference(const Model& model, const EmbedRequest& r, const std::vector<std::int64_t>& ids,
                   const std::vector<std::int64_t>& segments, std::uint64_t length) {
  const std::uint64_t dim = model.dim();
  Expected e;
  e.out.assign(ids.size() * dim, 0.0f);
  const auto run = [&](std::size_t begin, std::size_t count, std::uint64_t batch, std::uint64_t start) {
    if (e.error || count == 0) return;
    std::span<const std::int64_t> seg;
    if (!segments.empty()) seg = std::span(segments).subspan(begin, count);
    const Status s = reference_embed(model, std::span(ids).subspan(begin, count), batch, start,
                                     std::span(e.out).subspan(begin * dim, count * dim), seg);
    if (!s) {
      e.error = s.error().code();
      e.message = s.error().message();
    }
  };
  if (!r.position_ids.empty()) {  // one token at a time, at its explicit position
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const std::int64_t p = r.position_ids[i];
      if (p < 0) {
        e.error = ErrorCode::kOutOfRange;
        break;
      }
      run(i, 1, 1, static_cast<std::uint64_t>(p));
    }
  } else if (!r.sequence_offsets.empty()) {  // ragged: one call per sequence
    for (std::uint64_t s = 0; s < r.sequences; ++s) {
      run(r.sequence_offsets[s], r.sequence_offsets[s + 1] - r.sequence_offsets[s], 1, r.start_positions[s]);
    }
  } else {
    run(0, ids.size(), length ? r.sequences : 1, r.start);
  }
  return e;
}

// f32 units in the last place between two floats.
std::uint32_t ulps(float a, float b) {
  std::int32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  if (x < 0) x = INT32_MIN - x;
  if (y < 0) y = INT32_MIN - y;
  return static_cast<std::uint32_t>(x > y ? x - y : y - x);
}

// The ids as bags: Embedder::pool on every ISA and path against reference_pool. An output with
// positions, segments or a LayerNorm must be refused as unsupported; otherwise the accept/reject
// decision and its code must agree, and values are bit-identical (8 f32 ulps when normalized,
// identical across ISAs).
void pool_differential(FuzzedDataProvider& in, const Model& model, const std::vector<std::int64_t>& ids) {
  const std::uint64_t dim = model.dim();
  std::vector<std::uint64_t> bounds = {0};
  // Bag sizes 0 to 6 (empty bags included), at most ids + 4 bags; the last one ends at the last id.
  while (bounds.back() < ids.size() && bounds.size() < ids.size() + 4) {
    bounds.push_back(std::min<std::uint64_t>(ids.size(), bounds.back() + in.ConsumeIntegralInRange<std::uint64_t>(0, 6)));
  }
  if (bounds.back() < ids.size()) bounds.push_back(ids.size());
  if (in.ConsumeBool()) bounds.push_back(bounds.back());  // an empty last bag
  const std::uint64_t bags = bounds.size() - 1;
  static const PoolingMode kModes[] = {PoolingMode::kSum, PoolingMode::kMean, PoolingMode::kMax};
  const PoolingMode mode = in.PickValueInArray(kModes);
  const bool normalize = in.ConsumeBool();
  std::vector<float> weights;
  if (mode != PoolingMode::kMax && in.ConsumeBool()) {
    for (std::size_t i = 0; i < ids.size(); ++i) weights.push_back(static_cast<float>(in.ConsumeIntegral<std::int8_t>()) / 8.0f);
  }
  g_case += "; pool bags " + std::to_string(bags) + " mode " + std::string(pooling_mode_name(mode)) + " normalize " +
            std::to_string(normalize) + " weights " + std::to_string(!weights.empty());
  const bool poolable = model.position() == nullptr && model.segment() == nullptr && model.norm_weight() == nullptr;
  std::vector<float> want(bags * dim);
  const Status reference = poolable ? reference_pool(model, 0, ids, bounds, 0, weights, mode, normalize, want)
                                    : Status(Error(ErrorCode::kUnsupported, "not a bag of rows"));
  BagRequest r;
  r.ids = ids;
  r.offsets = bounds;
  r.weights = weights;
  r.mode = mode;
  r.normalize = normalize;
  std::vector<float> first;
  for (Isa isa : supported_isas()) {
    for (std::size_t inline_bytes : {std::size_t{1} << 30, std::size_t{0}}) {
      auto embedder = Embedder::create(model, {.isa = isa, .inline_bytes = inline_bytes});
      if (!embedder) fail("Embedder::create refused a supported ISA: " + embedder.error().message());
      const std::string where = std::string("pool ") + std::string(isa_name(isa)) + (inline_bytes ? " inline" : " parallel");
      std::vector<float> got(bags * dim, -77.0f);
      const Status s = embedder->pool(r, OutputSpan(got));
      if (s.ok() != reference.ok()) {
        fail(where + ": " + (s ? "accepted" : "refused (" + s.error().message() + ")") + " what the reference " +
             (reference ? "accepted" : "refused (" + reference.error().message() + ")"));
      }
      if (!s) {
        if (s.error().code() != reference.error().code()) {
          fail(where + ": error code " + error_code_name(s.error().code()) + ", reference " +
               error_code_name(reference.error().code()));
        }
        continue;
      }
      if (first.empty()) first = got;
      for (std::size_t k = 0; k < got.size(); ++k) {
        if (!same(got[k], first[k])) fail(where + ": element " + std::to_string(k) + " differs between ISAs or paths");
        const bool ok = same(got[k], want[k]) || (normalize && !std::isnan(got[k]) && ulps(got[k], want[k]) <= 8);
        if (!ok) fail(where + ": element " + std::to_string(k) + " is " + std::to_string(got[k]) + ", reference " +
                      std::to_string(want[k]));
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  auto models = make_models(in);
  if (!models) return 0;
  const Model* model = &models->model;
  const bool has_norm = models->without_norm.has_value();
  const std::uint64_t dim = model->dim();
  const std::uint64_t segment_rows = model->segment() ? model->segment()->rows : 0;

  // The request.
  EmbedRequest r;
  std::vector<std::int64_t> ids, segments, position_ids;
  std::vector<std::uint64_t> offsets, starts;
  const int layout = in.ConsumeIntegralInRange<int>(0, 2);  // 0 equal lengths, 1 ragged, 2 explicit positions
  const std::uint64_t sequences = in.ConsumeIntegralInRange<std::uint64_t>(1, 4);
  std::uint64_t length = 0;
  if (layout == 1) {
    offsets.push_back(0);
    for (std::uint64_t s = 0; s < sequences; ++s) {
      offsets.push_back(offsets.back() + in.ConsumeIntegralInRange<std::uint64_t>(0, 9));
      starts.push_back(in.ConsumeIntegralInRange<std::uint64_t>(0, model->max_positions() + 2));
    }
    r.sequences = sequences;
  } else {
    length = in.ConsumeIntegralInRange<std::uint64_t>(0, 12);
    r.sequences = layout == 2 ? 1 : sequences;
    r.start = in.ConsumeIntegralInRange<std::uint64_t>(0, model->max_positions() + 2);
  }
  const std::uint64_t n = layout == 1 ? offsets.back() : r.sequences * length;
  for (std::uint64_t i = 0; i < n; ++i) ids.push_back(pick_id(in, model->vocab_size()));
  if (segment_rows > 0 && in.ConsumeBool()) {
    for (std::uint64_t i = 0; i < n; ++i) segments.push_back(pick_id(in, segment_rows));
  }
  if (layout == 2) {
    if (model->metadata().padding_id >= 0 || model->position() == nullptr) return 0;  // no per-token oracle
    for (std::uint64_t i = 0; i < n; ++i) position_ids.push_back(pick_id(in, model->max_positions()));
  }
  r.ids = ids;
  r.segment_ids = segments;
  r.position_ids = position_ids;
  r.sequence_offsets = offsets;
  r.start_positions = starts;

  g_case = "dtype " + std::string(dtype_name(model->token().dtype)) + ", vocab " + std::to_string(model->vocab_size()) +
           ", dim " + std::to_string(dim) + ", positions " + std::to_string(model->max_positions()) + " offset " +
           std::to_string(model->metadata().position_offset) + " padding " + std::to_string(model->metadata().padding_id) +
           ", segments " + std::to_string(segment_rows) + ", norm " + std::to_string(has_norm) + "; layout " +
           std::to_string(layout) + ", sequences " + std::to_string(r.sequences) + ", start " + std::to_string(r.start) +
           ", ids";
  for (std::int64_t id : ids) g_case += " " + std::to_string(id);
  g_case += "; offsets";
  for (auto o : offsets) g_case += " " + std::to_string(o);
  g_case += "; starts";
  for (auto o : starts) g_case += " " + std::to_string(o);
  g_case += "; positions";
  for (auto o : position_ids) g_case += " " + std::to_string(o);
  const Expected want = reference(*model, r, ids, segments, length);
  std::vector<float> bound;
  if (has_norm && !want.error) {
    const Expected raw = reference(*models->without_norm, r, ids, segments, length);
    if (raw.error) fail("the reference refused without LayerNorm what it accepted with it");
    bound = norm_bounds(*model, raw.out, want.out);
  }
  std::vector<float> scalar_f32;
  for (Isa isa : supported_isas()) {
    for (std::size_t inline_bytes : {std::size_t{1} << 30, std::size_t{0}}) {
      auto embedder = Embedder::create(*model, {.isa = isa, .inline_bytes = inline_bytes});
      if (!embedder) fail("Embedder::create refused a supported ISA: " + embedder.error().message());
      const std::string where = std::string(isa_name(isa)) + (inline_bytes ? " inline" : " parallel");
      std::vector<float> got(n * dim, -77.0f);
      const Status s = embedder->embed(r, OutputSpan(got));
      if (s.ok() != !want.error) {
        fail(where + ": embed " + (s ? "accepted" : "refused (" + s.error().message() + ")") + " what the reference " +
             (want.error ? "refused (" + want.message + ")" : "accepted"));
      }
      if (!s) {
        if (s.error().code() != *want.error) {
          fail(where + ": error code " + error_code_name(s.error().code()) + ", reference " + error_code_name(*want.error));
        }
        // Nothing written on a refusal.
        for (float v : got) {
          if (v != -77.0f) fail(where + ": a refused request wrote output");
        }
        continue;
      }
      if (scalar_f32.empty()) scalar_f32 = got;
      for (std::size_t k = 0; k < got.size(); ++k) {
        if (!same(got[k], scalar_f32[k])) fail(where + ": element " + std::to_string(k) + " differs from the scalar kernel");
        const float w = want.out[k];
        const bool ok = same(got[k], w) || (has_norm && std::fabs(got[k] - w) <= bound[k]);
        if (!ok) {
          fail(where + ": element " + std::to_string(k) + " is " + std::to_string(got[k]) + ", reference " + std::to_string(w));
        }
      }
      // 16-bit outputs: the reference rounded once (one 16-bit ulp with LayerNorm).
      std::vector<BFloat16> bf16(n * dim);
      std::vector<Float16> f16(n * dim);
      if (!embedder->embed(r, OutputSpan(bf16)) || !embedder->embed(r, OutputSpan(f16))) {
        fail(where + ": a 16-bit output refused what f32 accepted");
      }
      for (std::size_t k = 0; k < got.size(); ++k) {
        const float w = want.out[k];
        const float wb = bf16_to_f32(f32_to_bf16(w)), wh = f16_to_f32(f32_to_f16(w));
        const float gb = bf16_to_f32(bf16[k].bits), gh = f16_to_f32(f16[k].bits);
        // One 16-bit ulp of the rounded value on top of the f32 bound.
        const bool ok_b = same(gb, wb) || (has_norm && std::fabs(gb - wb) <= std::fabs(wb) / 128 + bound[k] + 1e-6f);
        const bool ok_h = same(gh, wh) || (has_norm && std::fabs(gh - wh) <= std::fabs(wh) / 1024 + bound[k] + 1e-6f);
        if (!ok_b || !ok_h) {
          fail(where + ": 16-bit element " + std::to_string(k) + " bf16 " + std::to_string(gb) + " vs " +
               std::to_string(wb) + ", f16 " + std::to_string(gh) + " vs " + std::to_string(wh));
        }
      }
    }
  }
  pool_differential(in, *model, ids);
  return 0;
}
