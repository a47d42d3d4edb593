// Models with several named outputs (format 1.2): the metadata keys round trip and are checked,
// the model rules name the output at fault, and the Embedder computes every output on every ISA
// as the reference path does, including the row-0 rule for ids outside an output's table.
#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include "embedrt/embedder.hpp"
#include "embedrt/embedrt.hpp"
#include "embedrt/half.hpp"
#include "support/temp_dir.hpp"

using namespace embedrt;
using embedrt::test::TempDir;

namespace {

// A Gemma 3n-like model: a bf16 token table (vocab 50, dim 24) scaled as Gemma scales it, and a
// second output "per_layer_inputs" from a smaller bf16 table (40 rows of 3 x 5) whose ids past
// its rows read row 0.
struct TwoOutputs {
  std::uint64_t vocab = 50, dim = 24, per_layer_rows = 40;
  std::vector<std::uint64_t> per_layer_shape = {3, 5};
  DType dtype = DType::kBF16;
  bool per_layer_positions = false;  // give the second output a position table of its own
};

Metadata two_output_metadata(const TwoOutputs& s) {
  Metadata meta;
  meta.family = "test";
  meta.name = "inputs_embeds";
  meta.token_scale = 4.90625;  // bf16(sqrt(24))
  OutputRules per_layer;
  per_layer.name = "per_layer_inputs";
  per_layer.token_table = "per_layer";
  per_layer.token_scale = 2.234375;  // bf16(sqrt(5))
  per_layer.shape = s.per_layer_shape;
  per_layer.out_of_range = OutOfRangeIds::kRowZero;
  if (s.per_layer_positions) {
    per_layer.position_table = "per_layer_pos";
    per_layer.position_offset = 2;
    per_layer.context_length = 8;
  }
  meta.outputs.push_back(per_layer);
  return meta;
}

void fill_random(TableFileWriter& writer, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::size_t t = 0; t < writer.table_count(); ++t) {
    const TableSpec& spec = writer.spec(t);
    for (std::uint64_t r = 0; r < spec.rows; ++r) {
      const auto row = writer.row(t, r);
      for (std::uint64_t j = 0; j < spec.dim; ++j) {
        const float v = normal(rng);
        if (spec.dtype == DType::kF32) {
          std::memcpy(row.data() + 4 * j, &v, 4);
        } else {
          const std::uint16_t h = spec.dtype == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
          std::memcpy(row.data() + 2 * j, &h, 2);
        }
      }
    }
  }
}

std::string write_two_outputs(TempDir& dir, const TwoOutputs& s, const std::string& name = "two.embt") {
  std::uint64_t per_layer_dim = 1;
  for (std::uint64_t n : s.per_layer_shape) per_layer_dim *= n;
  std::vector<TableSpec> specs = {{"embed_tokens", Role::kToken, s.dtype, s.vocab, s.dim},
                                  {"per_layer", Role::kOther, s.dtype, s.per_layer_rows, per_layer_dim}};
  if (s.per_layer_positions) specs.push_back({"per_layer_pos", Role::kOther, s.dtype, 10, per_layer_dim});
  const std::string path = dir.file(name);
  auto writer = TableFileWriter::begin(path, specs, two_output_metadata(s), {.overwrite = true, .sync = false});
  REQUIRE(writer);
  std::mt19937 rng(7);
  fill_random(*writer, rng);
  REQUIRE(writer->commit());
  return path;
}

// The reference, one token at a time (start = the token's position), for one output.
std::vector<float> reference(const Model& model, std::size_t output, const std::vector<std::int64_t>& ids,
                             std::uint64_t start) {
  const std::uint64_t dim = model.outputs()[output].dim();
  std::vector<float> out(ids.size() * dim);
  REQUIRE(reference_embed(model, ids, 1, start, out, {}, output));
  return out;
}

}  // namespace

TEST_CASE("outputs: metadata of several outputs round trips, written as 1.2 only when used") {
  TempDir dir;
  const std::string path = write_two_outputs(dir, {.per_layer_positions = true});
  auto file = TableFile::open(path);
  REQUIRE(file);
  CHECK(file->version_major() == 1);
  CHECK(file->version_minor() == 2);
  const Metadata& m = file->metadata();
  CHECK(m.name == "inputs_embeds");
  CHECK(m.token_scale == 4.90625);
  REQUIRE(m.outputs.size() == 1);
  const OutputRules& o = m.outputs[0];
  CHECK(o.name == "per_layer_inputs");
  CHECK(o.token_table == "per_layer");
  CHECK(o.position_table == "per_layer_pos");
  CHECK(o.position_offset == 2);
  CHECK(o.context_length == 8);
  CHECK(o.token_scale == 2.234375);
  CHECK(o.shape == std::vector<std::uint64_t>{3, 5});
  CHECK(o.out_of_range == OutOfRangeIds::kRowZero);
  CHECK(o.output_scale == 1.0);
  // The typed rules are not duplicated among the kept unknown keys.
  for (const auto& [key, value] : m.extra) CHECK(key.rfind("outputs.", 0) != 0);

  // A single-output file without 1.2 rules stays 1.0.
  Metadata plain;
  const std::vector<float> row(4, 1.0f);
  const TableData tables[] = {{{"tok", Role::kToken, DType::kF32, 1, 4}, std::as_bytes(std::span(row))}};
  REQUIRE(write_table_file(dir.file("plain.embt"), tables, plain, {.sync = false}));
  auto plain_file = TableFile::open(dir.file("plain.embt"));
  REQUIRE(plain_file);
  CHECK(plain_file->version_minor() == 0);
  CHECK(plain_file->metadata().name == "embeddings");
  CHECK(plain_file->metadata().outputs.empty());
}

TEST_CASE("outputs: the model resolves each output's tables and shape") {
  TempDir dir;
  auto model = Model::open(write_two_outputs(dir, {}));
  REQUIRE(model);
  REQUIRE(model->outputs().size() == 2);
  const OutputInfo& primary = model->outputs()[0];
  const OutputInfo& per_layer = model->outputs()[1];
  CHECK(primary.name == "inputs_embeds");
  CHECK(primary.token_shape == std::vector<std::uint64_t>{24});
  CHECK(per_layer.name == "per_layer_inputs");
  CHECK(per_layer.token->name == "per_layer");
  CHECK(per_layer.dim() == 15);
  CHECK(per_layer.vocab_size() == 40);
  CHECK(per_layer.token_shape == std::vector<std::uint64_t>{3, 5});
  CHECK(model->find_output("per_layer_inputs") == &per_layer);
  CHECK(model->find_output("nope") == nullptr);
  CHECK(natural_output_dtype(*model, 1) == OutputDType::kBF16);
}

TEST_CASE("outputs: model rules name the output and the key at fault") {
  TempDir dir;
  const std::vector<float> row(15, 0.5f);
  const auto bytes = std::as_bytes(std::span(row));
  const auto open_with = [&](const OutputRules& rules, const std::string& second_table = "per_layer") {
    Metadata meta;
    meta.outputs.push_back(rules);
    const TableData tables[] = {{{"tok", Role::kToken, DType::kF32, 1, 15}, bytes},
                                {{second_table, Role::kOther, DType::kF32, 1, 15}, bytes}};
    const std::string path = dir.file("rules.embt");
    REQUIRE(write_table_file(path, tables, meta, {.overwrite = true, .sync = false}));
    return Model::open(path);
  };
  OutputRules rules;
  rules.name = "extra";
  rules.token_table = "missing";
  auto missing = open_with(rules);
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code() == ErrorCode::kNotFound);
  CHECK(missing.error().message().find("output 'extra': outputs.extra.token names table 'missing'") != std::string::npos);

  rules.token_table = "per_layer";
  rules.shape = {4, 4};
  auto bad_shape = open_with(rules);
  REQUIRE_FALSE(bad_shape);
  CHECK(bad_shape.error().message().find("output 'extra': shape [4,4] does not hold one token's 15 values") !=
        std::string::npos);

  rules.shape = {3, 5};
  rules.position_table = "per_layer";  // 1 row, offset 2
  rules.position_offset = 2;
  auto bad_offset = open_with(rules);
  REQUIRE_FALSE(bad_offset);
  CHECK(bad_offset.error().message().find("output 'extra': position.offset 2 leaves no row") != std::string::npos);

  rules.position_table.clear();
  rules.position_offset = 0;
  rules.pooling_weights_table = "per_layer";  // must be [rows, 1]
  auto bad_weights = open_with(rules);
  REQUIRE_FALSE(bad_weights);
  CHECK(bad_weights.error().message().find("pooling.weights table 'per_layer' must be [1, 1] f32") != std::string::npos);

  rules.pooling_weights_table.clear();
  auto good = open_with(rules);
  CHECK(good);
}

TEST_CASE("outputs: every output on every ISA equals the reference; ids past a row-0 output read row 0") {
  TempDir dir;
  for (bool positions : {false, true}) {
    CAPTURE(positions);
    auto model = Model::open(write_two_outputs(dir, {.per_layer_positions = positions}, positions ? "p.embt" : "n.embt"));
    REQUIRE(model);
    // 0, the last row of each table, ids past the per-layer table (40..49).
    const std::vector<std::int64_t> ids = {0, 39, 40, 49, 7, 45, 3};
    const std::uint64_t start = 1;
    const std::vector<float> want0 = reference(*model, 0, ids, start);
    const std::vector<float> want1 = reference(*model, 1, ids, start);
    // Row 0 is what ids past the per-layer table read.
    const std::uint64_t d1 = 15;
    if (!positions) {
      for (std::size_t i : {2, 3, 5}) {
        CHECK(std::memcmp(&want1[i * d1], &want1[0], d1 * 4) == 0);
      }
    }
    EmbedRequest r;
    r.ids = ids;
    r.start = start;
    for (Isa isa : supported_isas()) {
      for (std::size_t inline_bytes : {std::size_t{0}, std::size_t{1} << 20}) {
        CAPTURE(isa_name(isa));
        CAPTURE(inline_bytes);
        auto embedder = Embedder::create(*model, {.isa = isa, .inline_bytes = inline_bytes});
        REQUIRE(embedder);
        std::vector<float> out0(ids.size() * 24), out1(ids.size() * d1);
        const OutputTarget both[] = {{1, OutputSpan(out1)}, {0, OutputSpan(out0)}};
        REQUIRE(embedder->embed(r, both));
        CHECK(out0 == want0);
        CHECK(out1 == want1);
        // bf16 output: the f32 result rounded once.
        std::vector<BFloat16> half1(ids.size() * d1);
        const OutputTarget one[] = {{1, OutputSpan(half1)}};
        REQUIRE(embedder->embed(r, one));
        for (std::size_t k = 0; k < half1.size(); ++k) CHECK(half1[k].bits == f32_to_bf16(want1[k]));
        // The single-span call is the primary output.
        std::vector<float> primary(ids.size() * 24);
        REQUIRE(embedder->embed(r, OutputSpan(primary)));
        CHECK(primary == want0);
      }
    }
  }
}

TEST_CASE("outputs: ids are checked per output; errors name the output") {
  TempDir dir;
  auto model = Model::open(write_two_outputs(dir, {}));
  REQUIRE(model);
  auto embedder = Embedder::create(*model);
  REQUIRE(embedder);
  std::vector<float> out0(2 * 24), out1(2 * 15);
  EmbedRequest r;
  const std::vector<std::int64_t> past = {1, 50};
  r.ids = past;
  // The primary output refuses 50; the per-layer output alone reads row 0 for it.
  const OutputTarget both[] = {{0, OutputSpan(out0)}, {1, OutputSpan(out1)}};
  const Status refused = embedder->embed(r, both);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == ErrorCode::kOutOfRange);
  CHECK(refused.error().message() == "output 'inputs_embeds': sequence 0, position 1: id 50 is out of range [0, 50)");
  CHECK(refused.error().context().field == "ids");
  const OutputTarget per_layer[] = {{1, OutputSpan(out1)}};
  REQUIRE(embedder->embed(r, per_layer));
  const std::vector<std::int64_t> negative = {-5, 1};
  r.ids = negative;
  REQUIRE(embedder->embed(r, per_layer));
  CHECK(std::memcmp(out1.data(), reference(*model, 1, {0}, 0).data(), 15 * 4) == 0);

  // Targets: unknown index, twice the same output, wrong size.
  r.ids = past;
  const OutputTarget unknown[] = {{2, OutputSpan(out1)}};
  CHECK(embedder->embed(r, unknown).error().message() == "output index 2 is past the model's 2 outputs");
  const OutputTarget twice[] = {{1, OutputSpan(out1)}, {1, OutputSpan(out1)}};
  CHECK(embedder->embed(r, twice).error().message() == "output 'per_layer_inputs' is asked for twice");
  const OutputTarget wrong_size[] = {{1, OutputSpan(out0)}};
  CHECK(embedder->embed(r, wrong_size).error().message() ==
        "output 'per_layer_inputs': output has 48 elements, expected 2 ids x dim 15");
}

TEST_CASE("outputs: prefetch accepts any ids and refuses unknown outputs") {
  TempDir dir;
  auto model = Model::open(write_two_outputs(dir, {}));
  REQUIRE(model);
  auto embedder = Embedder::create(*model);
  REQUIRE(embedder);
  const std::vector<std::int64_t> ids = {0, 49, 50, -1, 1000000000000};
  CHECK(embedder->prefetch(ids));
  const std::size_t second[] = {1};
  CHECK(embedder->prefetch(ids, second, PrefetchTarget::kMemory));
  const std::size_t unknown[] = {5};
  CHECK(embedder->prefetch(ids, unknown).error().message() == "output index 5 is past the model's 2 outputs");
}
