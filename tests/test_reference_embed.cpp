// The reference path against values computed here from the source arrays, independently of the
// file format, plus every validation error.
#include <doctest/doctest.h>

#include <limits>

#include "embedrt/embedder.hpp"
#include "embedrt/embedrt.hpp"
#include "support/temp_dir.hpp"

using namespace embedrt;
using embedrt::test::TempDir;

namespace {

struct Tables {
  std::uint64_t vocab, context, dim;
  std::vector<float> tok, pos;
};

// Values chosen so that every sum is exact in float: the expected output is unambiguous.
Tables make_tables(std::uint64_t vocab, std::uint64_t context, std::uint64_t dim) {
  Tables t{vocab, context, dim, std::vector<float>(vocab * dim), std::vector<float>(context * dim)};
  for (std::uint64_t r = 0; r < vocab; ++r)
    for (std::uint64_t j = 0; j < dim; ++j) t.tok[r * dim + j] = static_cast<float>(r) + static_cast<float>(j) / 1024.0f;
  for (std::uint64_t r = 0; r < context; ++r)
    for (std::uint64_t j = 0; j < dim; ++j) t.pos[r * dim + j] = static_cast<float>(r * 65536) + static_cast<float>(j) * 0.25f;
  return t;
}

Model write_model(TempDir& dir, const Tables& t, std::uint64_t offset, bool with_position) {
  std::vector<TableData> tables{{{"tok", Role::kToken, DType::kF32, t.vocab, t.dim}, std::as_bytes(std::span(t.tok))}};
  Metadata meta;
  if (with_position) {
    tables.push_back({{"pos", Role::kPosition, DType::kF32, t.context, t.dim}, std::as_bytes(std::span(t.pos))});
    meta.position_kind = PositionKind::kLearned;
    meta.position_offset = offset;
  }
  const std::string path = dir.file("ref.embt");
  REQUIRE(write_table_file(path, tables, meta, {.overwrite = true, .sync = false}));
  auto model = Model::open(path);
  REQUIRE(model);
  return std::move(*model);
}

}  // namespace

TEST_CASE("GPT-2 style: token row plus position row, for every batch row") {
  TempDir dir;
  for (std::uint64_t dim : {1u, 3u, 17u, 769u}) {
    CAPTURE(dim);
    const Tables t = make_tables(50, 16, dim);
    const Model model = write_model(dir, t, 0, true);
    const std::vector<std::int64_t> ids = {3, 1, 4, 1, 5, 9, 2, 6, 49, 0, 0, 7};
    for (std::uint64_t batch : {1u, 2u, 3u, 4u}) {
      for (std::uint64_t start : {0u, 4u}) {
        const std::uint64_t length = ids.size() / batch;
        std::vector<float> out(ids.size() * dim);
        REQUIRE(reference_embed(model, ids, batch, start, out));
        for (std::uint64_t i = 0; i < ids.size(); ++i) {
          const std::uint64_t p = start + i % length;
          for (std::uint64_t j = 0; j < dim; ++j) {
            const float expected = t.tok[static_cast<std::uint64_t>(ids[i]) * dim + j] + t.pos[p * dim + j];
            if (out[i * dim + j] != expected) {
              FAIL_CHECK("mismatch at token " << i << " dim " << j);
              break;
            }
          }
        }
      }
    }
  }
}

TEST_CASE("OPT/RoBERTa position offset, and a model without positions (Llama)") {
  TempDir dir;
  const Tables t = make_tables(10, 8, 5);
  {
    const Model model = write_model(dir, t, 2, true);
    CHECK(model.max_positions() == 6);
    std::vector<float> out(2 * 5);
    REQUIRE(reference_embed(model, std::vector<std::int64_t>{7, 8}, 1, 0, out));
    for (std::uint64_t j = 0; j < 5; ++j) {
      CHECK(out[j] == t.tok[7 * 5 + j] + t.pos[2 * 5 + j]);
      CHECK(out[5 + j] == t.tok[8 * 5 + j] + t.pos[3 * 5 + j]);
    }
    const Status past = reference_embed(model, std::vector<std::int64_t>{1, 2}, 1, 5, out);
    REQUIRE_FALSE(past);
    CHECK(past.error().message() == "sequence 0, position 1: position 6 is past the limit of 6 positions");
  }
  {
    const Model model = write_model(dir, t, 0, false);
    std::vector<float> out(5);
    REQUIRE(reference_embed(model, std::vector<std::int64_t>{9}, 1, 123456789, out));
    for (std::uint64_t j = 0; j < 5; ++j) CHECK(out[j] == t.tok[9 * 5 + j]);
  }
}

TEST_CASE("validation names the sequence, position, value and limit, and writes nothing") {
  TempDir dir;
  const Tables t = make_tables(10, 8, 4);
  const Model model = write_model(dir, t, 0, true);
  std::vector<float> out(6 * 4, -7.0f);
  const auto untouched = [&] {
    for (float v : out)
      if (v != -7.0f) return false;
    return true;
  };
  struct Case {
    std::vector<std::int64_t> ids;
    std::uint64_t batch, start;
    ErrorCode code;
    std::string message;
  };
  const std::int64_t huge = std::numeric_limits<std::int64_t>::max();
  const Case cases[] = {
      {{1, 2, 3, 4, 10, 5}, 2, 0, ErrorCode::kOutOfRange, "sequence 1, position 1: id 10 is out of range [0, 10)"},
      {{1, 2, -1, 4, 0, 5}, 3, 0, ErrorCode::kOutOfRange, "sequence 1, position 0: id -1 is out of range [0, 10)"},
      {{1, 2, 3, 4, 5, huge}, 1, 0, ErrorCode::kOutOfRange,
       "sequence 0, position 5: id 9223372036854775807 is out of range [0, 10)"},
      {{1, 2, 3, 4, 5, 6}, 1, 3, ErrorCode::kOutOfRange, "sequence 0, position 5: position 8 is past the limit of 8 positions"},
      {{1, 2, 3, 4, 5, 6}, 2, std::numeric_limits<std::uint64_t>::max(), ErrorCode::kOutOfRange,
       "sequence 0, position 0: position 18446744073709551615 is past the limit of 8 positions"},
      {{1, 2, 3, 4, 5, 6}, 4, 0, ErrorCode::kInvalidArgument, "6 ids cannot be split into 4 sequences of equal length"},
      {{1, 2, 3, 4, 5, 6}, 0, 0, ErrorCode::kInvalidArgument, "6 ids cannot be split into 0 sequences of equal length"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.message);
    const Status s = reference_embed(model, c.ids, c.batch, c.start, out);
    REQUIRE_FALSE(s);
    CHECK(s.error().code() == c.code);
    CHECK(s.error().message() == c.message);
    CHECK(untouched());
  }
  SUBCASE("wrong output size") {
    std::vector<float> small(5);
    const Status s = reference_embed(model, std::vector<std::int64_t>{1, 2}, 1, 0, small);
    REQUIRE_FALSE(s);
    CHECK(s.error().message() == "output has 5 floats, expected 2 ids x dim 4");
  }
  SUBCASE("an empty batch is fine and writes nothing") {
    CHECK(reference_embed(model, {}, 3, 0, {}));
    CHECK(reference_embed(model, {}, 0, 0, {}));
  }
}

TEST_CASE("segments, output scale and LayerNorm follow FORMAT.md section 7") {
  TempDir dir;
  // tok[r] = (r, 2r), seg[s] = (10s, 0), pos[p] = (0, 100p); every value exact in float.
  const std::vector<float> tok = {0, 0, 1, 2, 2, 4, 3, 6}, seg = {0, 0, 10, 0}, pos = {0, 0, 0, 100, 0, 200};
  const std::vector<float> weight = {2.0f, 0.5f}, bias = {1.0f, -1.0f};
  const TableData tables[] = {
      {{"tok", Role::kToken, DType::kF32, 4, 2}, std::as_bytes(std::span(tok))},
      {{"seg", Role::kSegment, DType::kF32, 2, 2}, std::as_bytes(std::span(seg))},
      {{"pos", Role::kPosition, DType::kF32, 3, 2}, std::as_bytes(std::span(pos))},
      {{"w", Role::kNormWeight, DType::kF32, 1, 2}, std::as_bytes(std::span(weight))},
      {{"b", Role::kNormBias, DType::kF32, 1, 2}, std::as_bytes(std::span(bias))},
  };
  Metadata meta;
  meta.position_kind = PositionKind::kLearned;
  meta.output_scale = 4.0;
  meta.norm_epsilon = 0.0;
  const std::string path = dir.file("bert.embt");
  REQUIRE(write_table_file(path, tables, meta));
  auto model = Model::open(path);
  REQUIRE(model);

  // x = (tok[3] + seg[1] + pos[1]) * 4 = (13, 106) * 4 = (52, 424); two values: LayerNorm gives
  // (-1, +1) exactly, then * w + b = (-1, -0.5).
  std::vector<float> out(4);
  const std::vector<std::int64_t> ids = {3, 0}, segments = {1, 0};
  REQUIRE(reference_embed(*model, ids, 1, 1, out, segments));
  CHECK(out[0] == doctest::Approx(-1.0f).epsilon(1e-6));
  CHECK(out[1] == doctest::Approx(-0.5f).epsilon(1e-6));
  // Second token: (0 + 0 + (0, 200)) * 4 = (0, 800) -> (-1, 1) -> (-1, -0.5).
  CHECK(out[2] == doctest::Approx(-1.0f).epsilon(1e-6));
  CHECK(out[3] == doctest::Approx(-0.5f).epsilon(1e-6));

  const Status bad = reference_embed(*model, ids, 1, 0, out, std::vector<std::int64_t>{0, 2});
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message() == "sequence 0, position 1: segment 2 is out of range [0, 2)");
  const Status count = reference_embed(*model, ids, 1, 0, out, std::vector<std::int64_t>{0});
  REQUIRE_FALSE(count);
  CHECK(count.error().message() == "1 segment ids for 2 ids");
}

TEST_CASE("segment ids for a model without a segment table are refused") {
  TempDir dir;
  const Tables t = make_tables(4, 4, 2);
  const Model model = write_model(dir, t, 0, true);
  std::vector<float> out(2);
  const Status s = reference_embed(model, std::vector<std::int64_t>{1}, 1, 0, out, std::vector<std::int64_t>{0});
  REQUIRE_FALSE(s);
  CHECK(s.error().message() == "segment ids given, but the model has no segment table");
}

// Found by tests/fuzz/fuzz_embedder: with padding-aware positions only non-pads advance, so a
// sequence's last position is start + (its non-pads) - 1, not start + length - 1. The reference
// refused requests the kernels (and transformers) compute.
TEST_CASE("padding-aware positions: pads never run past the limit; only non-pads count") {
  TempDir dir;
  const Tables t = make_tables(4, 4, 3);  // offset 1: rows 1..3 for positions 0..2, row 0 for pads
  std::vector<TableData> tables{{{"tok", Role::kToken, DType::kF32, t.vocab, t.dim}, std::as_bytes(std::span(t.tok))},
                                {{"pos", Role::kPosition, DType::kF32, t.context, t.dim}, std::as_bytes(std::span(t.pos))}};
  Metadata meta;
  meta.position_kind = PositionKind::kLearned;
  meta.position_offset = 1;
  meta.padding_id = 0;
  REQUIRE(write_table_file(dir.file("pad.embt"), tables, meta));
  auto model = Model::open(dir.file("pad.embt"));
  REQUIRE(model);
  REQUIRE(model->max_positions() == 3);
  const auto row = [&](std::int64_t id, std::uint64_t position_row) {
    std::vector<float> r(t.dim);
    for (std::uint64_t j = 0; j < t.dim; ++j) r[j] = t.tok[id * t.dim + j] + t.pos[position_row * t.dim + j];
    return r;
  };
  std::vector<float> out(4 * t.dim);
  // All pads, start past the limit: every token takes the pad row.
  const std::vector<std::int64_t> pads = {0, 0, 0, 0};
  REQUIRE(reference_embed(*model, pads, 1, 5, out));
  CHECK(std::vector<float>(out.begin(), out.begin() + 3) == row(0, 0));
  // Length 4 > 3 positions, but two pads: the non-pads take positions 1 and 2 (start 1).
  const std::vector<std::int64_t> mixed = {2, 0, 3, 0};
  REQUIRE(reference_embed(*model, mixed, 1, 1, out));
  CHECK(std::vector<float>(out.begin(), out.begin() + 3) == row(2, 2));
  CHECK(std::vector<float>(out.begin() + 6, out.begin() + 9) == row(3, 3));
  // A third non-pad would be position 3: refused, naming it.
  const std::vector<std::int64_t> over = {2, 0, 3, 1};
  const Status s = reference_embed(*model, over, 1, 1, out);
  REQUIRE_FALSE(s);
  CHECK(s.error().message() == "sequence 0, position 3: position 3 is past the limit of 3 positions");
  // The Embedder agrees on all three.
  auto embedder = Embedder::create(*model);
  REQUIRE(embedder);
  std::vector<float> fast(4 * t.dim);
  EmbedRequest r;
  r.ids = pads;
  r.start = 5;
  CHECK(embedder->embed(r, OutputSpan(fast)));
  r.ids = mixed;
  r.start = 1;
  REQUIRE(embedder->embed(r, OutputSpan(fast)));
  REQUIRE(reference_embed(*model, mixed, 1, 1, out));
  CHECK(fast == out);
  r.ids = over;
  const Status e = embedder->embed(r, OutputSpan(fast));
  REQUIRE_FALSE(e);
  CHECK(e.error().message() == "sequence 0, position 3: position 3 is past the limit of 3 positions");
}
