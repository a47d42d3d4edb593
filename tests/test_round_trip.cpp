// Write then read back: every dtype, odd dims, metadata, alignment and open options.
#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include "embedrt/embedrt.hpp"
#include "embedrt/half.hpp"
#include "support/temp_dir.hpp"

using namespace embedrt;
using embedrt::test::TempDir;

namespace {

// Values exactly representable in every dtype under test (bf16 keeps 8 significant bits):
// k / 64 with |k| < 256.
float exact_value(std::mt19937& rng) {
  return static_cast<float>(std::uniform_int_distribution<int>(-255, 255)(rng)) / 64.0f;
}

// Encodes `values` (rows x dim) in `dtype`; for int8 the codes are the values themselves and each
// row gets its own scale and bias.
std::vector<std::byte> encode(DType dtype, std::uint64_t rows, std::uint64_t dim,
                              const std::vector<float>& values, std::vector<float>& decoded) {
  const std::uint64_t rb = row_bytes(dtype, dim);
  std::vector<std::byte> out(rows * rb);
  decoded.resize(rows * dim);
  for (std::uint64_t r = 0; r < rows; ++r) {
    std::byte* row = out.data() + r * rb;
    const float scale = 0.25f * static_cast<float>(r + 1);
    const float bias = -1.5f + static_cast<float>(r);
    for (std::uint64_t j = 0; j < dim; ++j) {
      const float v = values[r * dim + j];
      switch (dtype) {
        case DType::kF32:
          std::memcpy(row + 4 * j, &v, 4);
          decoded[r * dim + j] = v;
          break;
        case DType::kF16: {
          const std::uint16_t h = f32_to_f16(v);
          std::memcpy(row + 2 * j, &h, 2);
          decoded[r * dim + j] = v;
          break;
        }
        case DType::kBF16: {
          const std::uint16_t h = f32_to_bf16(v);
          std::memcpy(row + 2 * j, &h, 2);
          decoded[r * dim + j] = v;
          break;
        }
        case DType::kInt8Rowwise: {
          const auto q = static_cast<std::int8_t>(static_cast<int>(v * 64.0f) % 128);
          row[j] = static_cast<std::byte>(q);
          decoded[r * dim + j] = static_cast<float>(q) * scale + bias;
          break;
        }
        case DType::kInt32: {
          const auto i = static_cast<std::int32_t>(v * 1000.0f);
          std::memcpy(row + 4 * j, &i, 4);
          decoded[r * dim + j] = static_cast<float>(i);
          break;
        }
        case DType::kInt4Rowwise: {
          const auto q = static_cast<unsigned>(static_cast<int>(v * 64.0f) & 15);
          row[j / 2] |= static_cast<std::byte>(j % 2 ? q << 4 : q);
          decoded[r * dim + j] = static_cast<float>(q) * scale + bias;
          break;
        }
      }
    }
    if (dtype == DType::kInt8Rowwise) {
      const std::uint64_t tail = int8_params_offset(dim);
      std::memcpy(row + tail, &scale, 4);
      std::memcpy(row + tail + 4, &bias, 4);
    }
    if (dtype == DType::kInt4Rowwise) {  // scale and bias are exact in f16
      const std::uint16_t s16 = f32_to_f16(scale), b16 = f32_to_f16(bias);
      std::memcpy(row + int4_params_offset(dim), &s16, 2);
      std::memcpy(row + int4_params_offset(dim) + 2, &b16, 2);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("round trip of every dtype at odd dims") {
  TempDir dir;
  std::mt19937 rng(1);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kInt8Rowwise, DType::kInt32, DType::kInt4Rowwise}) {
    for (std::uint64_t dim : {1u, 3u, 17u, 769u}) {
      for (std::uint64_t rows : {1u, 7u}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(dim);
        CAPTURE(rows);
        std::vector<float> values(rows * dim);
        for (float& v : values) v = exact_value(rng);
        std::vector<float> expected;
        const auto bytes = encode(dtype, rows, dim, values, expected);
        const TableData table{{"weights", Role::kToken, dtype, rows, dim}, bytes};
        const std::string path = dir.file("t.embt");
        REQUIRE(write_table_file(path, {&table, 1}, Metadata{}, {.overwrite = true, .sync = false}));

        auto file = TableFile::open(path);
        REQUIRE(file);
        REQUIRE(file->tables().size() == 1);
        const TableView& t = file->tables()[0];
        CHECK(t.name == "weights");
        CHECK(t.role == Role::kToken);
        CHECK(t.dtype == dtype);
        CHECK(t.rows == rows);
        CHECK(t.dim == dim);
        CHECK(t.row_stride % 64 == 0);
        CHECK(reinterpret_cast<std::uintptr_t>(t.bytes.data()) % 4096 == 0);
        CHECK(t.offset % 4096 == 0);
        CHECK(file->verify());
        // The lowest version that expresses the file: int32 tables are 2.0 (FORMAT.md 8).
        CHECK(file->version_major() == (dtype_version(dtype).major));
        CHECK(file->version_major() == (dtype == DType::kInt32 || dtype == DType::kInt4Rowwise ? 2 : 1));

        const std::uint64_t rb = row_bytes(dtype, dim);
        std::vector<float> decoded(dim);
        for (std::uint64_t r = 0; r < rows; ++r) {
          CHECK(std::memcmp(t.row(r), bytes.data() + r * rb, rb) == 0);
          for (std::uint64_t k = rb; k < t.row_stride; ++k) CHECK(t.row(r)[k] == std::byte{0});
          decode_row(t, r, decoded);
          for (std::uint64_t j = 0; j < dim; ++j) CHECK(decoded[j] == expected[r * dim + j]);
        }
      }
    }
  }
}

TEST_CASE("metadata and several tables round-trip") {
  TempDir dir;
  Metadata meta;
  meta.family = "opt";
  meta.source_files = "a/pytorch_model.bin\nb.safetensors";
  meta.source_dtype = "float16";
  meta.context_length = 6;
  meta.position_offset = 2;
  meta.position_kind = PositionKind::kLearned;
  meta.output_scale = 27.712812921102035;
  meta.norm_epsilon = 1e-12;
  std::vector<float> tok(11 * 3, 1.0f), pos(8 * 3, 2.0f), w(3, 1.0f), b(3, 0.0f);
  const TableData tables[] = {
      {{"tok", Role::kToken, DType::kF32, 11, 3}, std::as_bytes(std::span(tok))},
      {{"pos", Role::kPosition, DType::kF32, 8, 3}, std::as_bytes(std::span(pos))},
      {{"ln.w", Role::kNormWeight, DType::kF32, 1, 3}, std::as_bytes(std::span(w))},
      {{"ln.b", Role::kNormBias, DType::kF32, 1, 3}, std::as_bytes(std::span(b))},
  };
  const std::string path = dir.file("m.embt");
  REQUIRE(write_table_file(path, tables, meta));
  auto model = Model::open(path);
  REQUIRE(model);
  const Metadata& m = model->metadata();
  CHECK(m.family == "opt");
  CHECK(m.source_files == meta.source_files);
  CHECK(m.source_dtype == "float16");
  CHECK(m.context_length == 6);
  CHECK(m.position_offset == 2);
  CHECK(m.position_kind == PositionKind::kLearned);
  CHECK(m.output_scale == meta.output_scale);
  CHECK(m.norm_epsilon == 1e-12);
  CHECK(model->max_positions() == 6);
  CHECK(model->norm_weight()->name == "ln.w");
  CHECK(model->norm_bias()->name == "ln.b");
  CHECK(model->segment() == nullptr);
  CHECK(model->file().find("pos") == model->position());
  CHECK(model->file().find("missing") == nullptr);
  // Tables follow each other on page boundaries with nothing but padding between them.
  const auto views = model->file().tables();
  for (std::size_t i = 1; i < views.size(); ++i) {
    CHECK(views[i].offset == (views[i - 1].offset + views[i - 1].bytes.size() + 4095) / 4096 * 4096);
  }
  CHECK(model->file().file_size() == views.back().offset + views.back().bytes.size() + 8);
}

TEST_CASE("every residency, locked or not, opens a usable file") {
  TempDir dir;
  std::vector<float> tok(4 * 8, 0.5f);
  const TableData table{{"tok", Role::kToken, DType::kF32, 4, 8}, std::as_bytes(std::span(tok))};
  const std::string path = dir.file("o.embt");
  REQUIRE(write_table_file(path, {&table, 1}, Metadata{}));
  for (Residency residency : {Residency::kMmap, Residency::kPopulate, Residency::kCopy}) {
    for (bool lock : {false, true}) {
      CAPTURE(residency_name(residency));
      CAPTURE(lock);
      auto file = TableFile::open(path, {.residency = residency, .lock_in_memory = lock});
      if (!file && lock) {
        // mlock may be refused by RLIMIT_MEMLOCK; the error must say so.
        CHECK(file.error().message().find("lock") != std::string::npos);
        continue;
      }
      REQUIRE(file);
      CHECK(file->residency() == residency);
      CHECK(file->verify());
    }
  }
}

TEST_CASE("a model outlives the TableFile it came from, and copies share the mapping") {
  TempDir dir;
  std::vector<float> tok(2 * 2, 3.0f);
  const TableData table{{"tok", Role::kToken, DType::kF32, 2, 2}, std::as_bytes(std::span(tok))};
  const std::string path = dir.file("keep.embt");
  REQUIRE(write_table_file(path, {&table, 1}, Metadata{}));
  std::optional<Model> model;
  {
    auto file = TableFile::open(path);
    REQUIRE(file);
    auto m = Model::from_file(*file);
    REQUIRE(m);
    model.emplace(std::move(*m));
  }
  std::filesystem::remove(path);  // the mapping keeps the data alive
  std::vector<float> row(2);
  decode_row(model->token(), 1, row);
  CHECK(row[0] == 3.0f);
}
