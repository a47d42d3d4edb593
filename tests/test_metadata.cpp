// The typed metadata block (FORMAT.md 5) and the model-level consistency checks.
#include <doctest/doctest.h>

#include <cmath>

#include "embedrt/embedrt.hpp"
#include "support/raw_file.hpp"
#include "support/temp_dir.hpp"

using namespace embedrt;
using embedrt::test::RawFile;
using embedrt::test::TempDir;

namespace {

// One record laid out as FORMAT.md 5 describes, written independently of the runtime's codec.
std::vector<unsigned char> record(const std::string& key, std::uint8_t type,
                                  const std::vector<unsigned char>& value) {
  std::vector<unsigned char> r(8);
  const auto key_size = static_cast<std::uint16_t>(key.size());
  const auto value_size = static_cast<std::uint32_t>(value.size());
  std::memcpy(r.data(), &key_size, 2);
  r[2] = type;
  std::memcpy(r.data() + 4, &value_size, 4);
  r.insert(r.end(), key.begin(), key.end());
  r.insert(r.end(), value.begin(), value.end());
  r.resize((r.size() + 7) / 8 * 8, 0);
  return r;
}

template <typename T>
std::vector<unsigned char> bytes_of(T v) {
  std::vector<unsigned char> b(sizeof v);
  std::memcpy(b.data(), &v, sizeof v);
  return b;
}

std::vector<unsigned char> text(const std::string& s) { return {s.begin(), s.end()}; }

struct Fixture {
  TempDir dir;
  RawFile good;
  Fixture() {
    std::vector<float> tok(4 * 2, 1.0f);
    const TableData table{{"tok", Role::kToken, DType::kF32, 4, 2}, std::as_bytes(std::span(tok))};
    Metadata meta;
    meta.source_files = std::string(200, 'x');  // room to write test records into the block
    const std::string path = dir.file("good.embt");
    REQUIRE(write_table_file(path, {&table, 1}, meta));
    good.bytes = test::read_file(path);
  }

  // Replaces the metadata block with `records` followed by zero padding, and reseals.
  RawFile with_records(const std::vector<std::vector<unsigned char>>& records) {
    RawFile raw = good;
    const std::uint64_t offset = raw.get<std::uint64_t>(40), size = raw.get<std::uint64_t>(48);
    std::vector<unsigned char> block;
    for (const auto& r : records) block.insert(block.end(), r.begin(), r.end());
    REQUIRE(block.size() <= size);
    std::fill(raw.bytes.begin() + static_cast<std::ptrdiff_t>(offset),
              raw.bytes.begin() + static_cast<std::ptrdiff_t>(offset + size), 0);
    std::copy(block.begin(), block.end(), raw.bytes.begin() + static_cast<std::ptrdiff_t>(offset));
    raw.reseal();
    return raw;
  }

  Result<TableFile> open(const RawFile& raw) {
    const std::string path = dir.file("m.embt");
    test::write_file(path, raw.bytes);
    return TableFile::open(path);
  }

  void expect_error(const RawFile& raw, const std::string& needle) {
    auto file = open(raw);
    REQUIRE_FALSE(file);
    CHECK(file.error().code() == ErrorCode::kMalformed);
    INFO(file.error().message());
    CHECK(file.error().message().find(needle) != std::string::npos);
  }
};

}  // namespace

TEST_CASE_FIXTURE(Fixture, "absent keys take their defaults and unknown keys are ignored") {
  auto file = open(with_records({record("vendor.note", 4, text("hello")),
                                 record("context_length", 1, bytes_of<std::uint64_t>(77))}));
  REQUIRE(file);
  CHECK(file->metadata().context_length == 77);
  CHECK(file->metadata().family == "custom");
  CHECK(file->metadata().output_scale == 1.0);
  CHECK(file->metadata().norm_epsilon == 1e-5);
  CHECK(file->metadata().position_kind == PositionKind::kNone);
}

TEST_CASE_FIXTURE(Fixture, "malformed metadata records") {
  expect_error(with_records({record("context_length", 4, text("12345678"))}),
               "'context_length' has type string, expected u64");
  expect_error(with_records({record("output.scale", 1, bytes_of<std::uint64_t>(1))}),
               "'output.scale' has type u64, expected f64");
  expect_error(with_records({record("model.family", 4, text("a")), record("model.family", 4, text("b"))}),
               "duplicate key 'model.family'");
  expect_error(with_records({record("Bad Key", 4, text("a"))}), "invalid key");
  expect_error(with_records({record("x", 9, bytes_of<std::uint64_t>(0))}), "unknown type 9");
  expect_error(with_records({record("context_length", 1, bytes_of<std::uint32_t>(5))}),
               "value_size 4, expected 8");
  expect_error(with_records({record("position.kind", 4, text("rotary"))}), "position.kind is 'rotary'");
  expect_error(with_records({record("output.scale", 3, bytes_of(std::nan("")))}), "output.scale is not finite");
  expect_error(with_records({record("norm.epsilon", 3, bytes_of(-1.0))}), "norm.epsilon is negative");
  SUBCASE("a record longer than the block") {
    auto r = record("source.dtype", 4, text("f32"));
    const std::uint32_t huge = 1u << 30;
    std::memcpy(r.data() + 4, &huge, 4);
    expect_error(with_records({r}), "runs past the end of the block");
  }
  SUBCASE("bytes after a zero record header") {
    RawFile raw = with_records({record("model.family", 4, text("gpt2"))});
    const std::uint64_t offset = raw.get<std::uint64_t>(40), size = raw.get<std::uint64_t>(48);
    raw.bytes[offset + size - 3] = 7;
    raw.reseal();
    expect_error(raw, "has key_size 0");
  }
}

TEST_CASE_FIXTURE(Fixture, "1.2 output keys: malformed values are refused at open, naming the key") {
  const auto u64 = [](std::uint64_t v) { return bytes_of(v); };
  expect_error(with_records({record("outputs.x.shape", 4, text("3,5"))}),
               "output 'x' has rules but no token table (key 'outputs.x.token')");
  expect_error(with_records({record("outputs.x.token", 1, u64(1))}), "key 'outputs.x.token' has type u64, expected string");
  expect_error(with_records({record("output.shape", 4, text("3,,5"))}),
               "output.shape is '3,,5', expected positive integers separated by commas");
  expect_error(with_records({record("output.shape", 4, text("0"))}), "output.shape is '0', expected positive integers");
  expect_error(with_records({record("ids.out_of_range", 4, text("clamp"))}), "ids.out_of_range is 'clamp', expected refuse or row0");
  expect_error(with_records({record("pooling.mode", 4, text("median"))}),
               "pooling.mode is 'median', expected none, sum, mean or max");
  expect_error(with_records({record("pooling.normalize", 1, u64(2))}), "pooling.normalize is 2, expected 0 or 1");
  expect_error(with_records({record("output.name", 4, text("has_dash-"))}), "output.name must be 1 to 63 bytes of [a-z0-9_]");
  expect_error(with_records({record("outputs.embeddings.token", 4, text("tok"))}), "output 'embeddings' is defined twice");
  expect_error(with_records({record("outputs." + std::string(64, 'a') + ".token", 4, text("tok"))}),
               "is longer than 63 bytes");
  expect_error(with_records({record("outputs.x.token", 4, text(""))}), "outputs.x.token is empty or longer than 63 bytes");

  // An unknown rule of an output is an unknown key: kept, never used.
  auto kept = open(with_records({record("outputs.x.future_rule", 1, u64(3))}));
  REQUIRE(kept);
  CHECK(kept->metadata().outputs.empty());
  CHECK(kept->metadata().extra.count("outputs.x.future_rule") == 1);
  // Rules of one output may come in any order; outputs keep the order of their first key.
  auto ordered = open(with_records({record("outputs.b.shape", 4, text("2")), record("outputs.a.token", 4, text("tok")),
                                    record("outputs.b.token", 4, text("tok"))}));
  REQUIRE(ordered);
  REQUIRE(ordered->metadata().outputs.size() == 2);
  CHECK(ordered->metadata().outputs[0].name == "b");
  CHECK(ordered->metadata().outputs[0].shape == std::vector<std::uint64_t>{2});
  CHECK(ordered->metadata().outputs[1].name == "a");
}

namespace {

struct ModelCase {
  std::vector<TableSpec> specs;
  Metadata meta;
};

Result<Model> build_model(TempDir& dir, const ModelCase& c) {
  std::vector<std::vector<std::byte>> storage;
  std::vector<TableData> tables;
  for (const TableSpec& s : c.specs) {
    storage.emplace_back(s.rows * row_bytes(s.dtype, s.dim));
    tables.push_back({s, storage.back()});
  }
  const std::string path = dir.file("model.embt");
  Status written = write_table_file(path, tables, c.meta, {.overwrite = true, .sync = false});
  REQUIRE(written);
  return Model::open(path);
}

}  // namespace

TEST_CASE("model consistency checks") {
  TempDir dir;
  Metadata learned;
  learned.position_kind = PositionKind::kLearned;
  struct Case {
    const char* name;
    ModelCase model;
    ErrorCode code;
    const char* needle;
  };
  const Case cases[] = {
      {"no token table", {{{"pos", Role::kPosition, DType::kF32, 4, 8}}, learned},
       ErrorCode::kNotFound, "no table has the role 'token'"},
      {"position width", {{{"t", Role::kToken, DType::kF32, 4, 8}, {"p", Role::kPosition, DType::kF32, 4, 9}}, learned},
       ErrorCode::kMalformed, "has dim 9, the token table has 8"},
      {"segment width", {{{"t", Role::kToken, DType::kF32, 4, 8}, {"s", Role::kSegment, DType::kF16, 2, 7}}, {}},
       ErrorCode::kMalformed, "segment table 's' has dim 7"},
      {"norm weight rows", {{{"t", Role::kToken, DType::kF32, 4, 8}, {"w", Role::kNormWeight, DType::kF32, 2, 8}}, {}},
       ErrorCode::kMalformed, "must be one f32 row"},
      {"norm weight dtype", {{{"t", Role::kToken, DType::kF32, 4, 8}, {"w", Role::kNormWeight, DType::kF16, 1, 8}}, {}},
       ErrorCode::kMalformed, "must be one f32 row"},
      {"bias without weight", {{{"t", Role::kToken, DType::kF32, 4, 8}, {"b", Role::kNormBias, DType::kF32, 1, 8}}, {}},
       ErrorCode::kMalformed, "norm_bias table without a norm_weight"},
      {"position table but kind none", {{{"t", Role::kToken, DType::kF32, 4, 8}, {"p", Role::kPosition, DType::kF32, 4, 8}}, {}},
       ErrorCode::kMalformed, "position.kind is 'none' but the file has position table"},
      {"kind learned without a table", {{{"t", Role::kToken, DType::kF32, 4, 8}}, learned},
       ErrorCode::kMalformed, "has no position table"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    auto model = build_model(dir, c.model);
    REQUIRE_FALSE(model);
    CHECK(model.error().code() == c.code);
    INFO(model.error().message());
    CHECK(model.error().message().find(c.needle) != std::string::npos);
  }
  SUBCASE("position offset and context length against the table") {
    Metadata meta = learned;
    meta.position_offset = 4;
    auto model = build_model(dir, {{{"t", Role::kToken, DType::kF32, 4, 8}, {"p", Role::kPosition, DType::kF32, 4, 8}}, meta});
    REQUIRE_FALSE(model);
    CHECK(model.error().message().find("position.offset 4 leaves no row") != std::string::npos);
    meta.position_offset = 2;
    meta.context_length = 3;
    model = build_model(dir, {{{"t", Role::kToken, DType::kF32, 4, 8}, {"p", Role::kPosition, DType::kF32, 4, 8}}, meta});
    REQUIRE_FALSE(model);
    CHECK(model.error().message().find("context_length 3 exceeds") != std::string::npos);
    meta.context_length = 2;
    model = build_model(dir, {{{"t", Role::kToken, DType::kF32, 4, 8}, {"p", Role::kPosition, DType::kF32, 4, 8}}, meta});
    REQUIRE(model);
    CHECK(model->max_positions() == 2);
  }
}

TEST_CASE_FIXTURE(Fixture, "format 1.1 keys: token.scale and position.padding_id, read from independently written records") {
  auto file = open(with_records({record("token.scale", 3, bytes_of(6.9375)), record("position.padding_id", 2, bytes_of<std::int64_t>(1)),
                                 record("recipe.name", 4, text("gemma")), record("config.hidden_size", 1, bytes_of<std::uint64_t>(48))}));
  REQUIRE(file);
  CHECK(file->metadata().token_scale == 6.9375);
  CHECK(file->metadata().padding_id == 1);
  // Other keys are kept, typed, for provenance.
  CHECK(std::get<std::string>(file->metadata().extra.at("recipe.name")) == "gemma");
  CHECK(std::get<std::uint64_t>(file->metadata().extra.at("config.hidden_size")) == 48);
  expect_error(with_records({record("token.scale", 3, bytes_of(HUGE_VAL))}), "token.scale is not finite");
  expect_error(with_records({record("position.padding_id", 2, bytes_of<std::int64_t>(-3))}), "position.padding_id is negative");
  expect_error(with_records({record("position.padding_id", 1, bytes_of<std::uint64_t>(1))}), "has type u64, expected i64");
}

TEST_CASE("writers use the lowest minor version that expresses the file, and round-trip provenance keys") {
  TempDir dir;
  std::vector<float> tok(4 * 2, 1.0f);
  const TableData table{{"tok", Role::kToken, DType::kF32, 4, 2}, std::as_bytes(std::span(tok))};
  Metadata plain;
  plain.extra["recipe.name"] = std::string("llama");
  plain.extra["config.rms_norm_eps"] = 1e-6;
  plain.extra["config.pad_token_id"] = std::int64_t{-1};
  REQUIRE(write_table_file(dir.file("plain.embt"), {&table, 1}, plain));
  auto a = TableFile::open(dir.file("plain.embt"));
  REQUIRE(a);
  CHECK(a->version_minor() == 0);
  CHECK(a->metadata().extra == plain.extra);
  Metadata scaled = plain;
  scaled.token_scale = 45.25;
  REQUIRE(write_table_file(dir.file("scaled.embt"), {&table, 1}, scaled));
  auto b = TableFile::open(dir.file("scaled.embt"));
  REQUIRE(b);
  CHECK(b->version_minor() == 1);
  CHECK(b->metadata().token_scale == 45.25);
  Metadata bad;
  bad.extra["Config.Bad Key"] = std::string("x");
  const Status refused = write_table_file(dir.file("bad.embt"), {&table, 1}, bad);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message() == "metadata key 'Config.Bad Key' is not 1-255 bytes of [a-z0-9._]");
}

TEST_CASE_FIXTURE(Fixture, "strings and table names must be UTF-8 (FORMAT.md 4 and 5)") {
  expect_error(with_records({record("model.family", 4, {'g', 0xff, 't'})}), "key 'model.family': string value is not valid UTF-8");
  expect_error(with_records({record("vendor.note", 4, {0xc0, 0x80})}), "not valid UTF-8");  // overlong NUL
  std::vector<float> tok(4 * 2, 1.0f);
  const TableData table{{"tok\xff", Role::kToken, DType::kF32, 4, 2}, std::as_bytes(std::span(tok))};
  const Status refused = write_table_file(dir.file("bad-name.embt"), {&table, 1}, {});
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message().find("name is not valid UTF-8") != std::string::npos);
  CHECK(is_valid_utf8("caf\xc3\xa9 \xf0\x9f\x98\x80"));
  CHECK_FALSE(is_valid_utf8("\xed\xa0\x80"));  // a surrogate
  CHECK(to_valid_utf8("a\xff" "b\xc3\xa9") == "a\xef\xbf\xbd" "b\xc3\xa9");
}

TEST_CASE_FIXTURE(Fixture, "reader errors name the file in their context") {
  RawFile raw = with_records({record("position.kind", 4, text("rotary"))});
  auto file = open(raw);
  REQUIRE_FALSE(file);
  CHECK(file.error().context().file.find(".embt") != std::string::npos);
}
