// Atomic writes: the target is replaced whole or not at all, and no temporary file is left.
#include <doctest/doctest.h>
#include <sys/mount.h>
#include <unistd.h>

#include "embedrt/embedrt.hpp"
#include "support/temp_dir.hpp"

using namespace embedrt;
using embedrt::test::TempDir;

namespace {

std::vector<float> iota_floats(std::size_t n, float first) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = first + static_cast<float>(i);
  return v;
}

Status write_simple(const std::string& path, float first, WriteOptions options = {}) {
  const auto tok = iota_floats(6 * 4, first);
  const TableData table{{"tok", Role::kToken, DType::kF32, 6, 4}, std::as_bytes(std::span(tok))};
  return write_table_file(path, {&table, 1}, Metadata{}, options);
}

float first_value(const std::string& path) {
  auto file = TableFile::open(path);
  REQUIRE(file);
  std::vector<float> row(4);
  decode_row(file->tables()[0], 0, row);
  return row[0];
}

}  // namespace

TEST_CASE("an existing target is kept unless overwrite is asked for") {
  TempDir dir;
  const std::string path = dir.file("m.embt");
  REQUIRE(write_simple(path, 1.0f));
  const Status again = write_simple(path, 2.0f);
  REQUIRE_FALSE(again);
  CHECK(again.error().code() == ErrorCode::kAlreadyExists);
  CHECK(again.error().message().find(path) != std::string::npos);
  CHECK(first_value(path) == 1.0f);
  REQUIRE(write_simple(path, 3.0f, {.overwrite = true}));
  CHECK(first_value(path) == 3.0f);
  CHECK(dir.entries() == std::vector<std::string>{"m.embt"});
}

TEST_CASE("a writer dropped before commit leaves neither target nor temporary file") {
  TempDir dir;
  const std::string path = dir.file("never.embt");
  {
    auto writer = TableFileWriter::begin(path, {{"tok", Role::kToken, DType::kF32, 3, 3}}, Metadata{});
    REQUIRE(writer);
    CHECK(dir.entries().size() == 1);  // the temporary file exists while writing
    writer->row_f32(0, 0)[0] = 1.0f;
  }
  CHECK(dir.entries().empty());
}

TEST_CASE("streaming rows through the writer, and commit twice") {
  TempDir dir;
  const std::string path = dir.file("s.embt");
  auto writer = TableFileWriter::begin(
      path, {{"tok", Role::kToken, DType::kF32, 5, 3}, {"int8", Role::kOther, DType::kInt8Rowwise, 2, 5}},
      Metadata{});
  REQUIRE(writer);
  CHECK(writer->row_stride(0) == 64);
  CHECK(writer->row(1, 0).size() == 16);  // align_up(5, 4) + 8
  for (std::uint64_t r = 0; r < 5; ++r) {
    auto row = writer->row_f32(0, r);
    REQUIRE(row.size() == 3);
    for (std::size_t j = 0; j < 3; ++j) row[j] = static_cast<float>(10 * r + j);
  }
  CHECK_FALSE(std::filesystem::exists(path));  // nothing under the target name before commit
  REQUIRE(writer->commit());
  const Status twice = writer->commit();
  CHECK_FALSE(twice);
  auto file = TableFile::open(path);
  REQUIRE(file);
  CHECK(file->verify());
  std::vector<float> row(3);
  decode_row(file->tables()[0], 4, row);
  CHECK(row == std::vector<float>{40.0f, 41.0f, 42.0f});
  CHECK(dir.entries() == std::vector<std::string>{"s.embt"});
}

TEST_CASE("invalid table specs are refused before anything is created") {
  TempDir dir;
  const std::string path = dir.file("x.embt");
  struct Case {
    const char* name;
    std::vector<TableSpec> specs;
    const char* needle;
  };
  const Case cases[] = {
      {"empty name", {{"", Role::kToken, DType::kF32, 1, 1}}, "name must be"},
      {"64-byte name", {{std::string(64, 'n'), Role::kToken, DType::kF32, 1, 1}}, "name must be"},
      {"duplicate name", {{"a", Role::kToken, DType::kF32, 1, 1}, {"a", Role::kOther, DType::kF32, 1, 1}}, "duplicate name"},
      {"duplicate role", {{"a", Role::kToken, DType::kF32, 1, 1}, {"b", Role::kToken, DType::kF32, 1, 1}}, "second table with role token"},
      {"zero rows", {{"a", Role::kToken, DType::kF32, 0, 1}}, "needs rows >= 1"},
      {"zero dim", {{"a", Role::kToken, DType::kF32, 1, 0}}, "needs rows >= 1"},
      {"too large", {{"a", Role::kToken, DType::kF32, std::uint64_t{1} << 62, 4096}}, "too large"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    auto writer = TableFileWriter::begin(path, c.specs, Metadata{});
    REQUIRE_FALSE(writer);
    CHECK(writer.error().code() == ErrorCode::kInvalidArgument);
    INFO(writer.error().message());
    CHECK(writer.error().message().find(c.needle) != std::string::npos);
  }
  CHECK(dir.entries().empty());

  std::vector<float> short_data(5);
  const TableData table{{"tok", Role::kToken, DType::kF32, 2, 3}, std::as_bytes(std::span(short_data))};
  const Status s = write_table_file(path, {&table, 1}, Metadata{});
  REQUIRE_FALSE(s);
  CHECK(s.error().message().find("20 data bytes, expected rows x row_bytes = 24") != std::string::npos);
}

TEST_CASE("a folder that does not exist") {
  const Status s = write_simple("/nonexistent-embedrt-dir/m.embt", 1.0f);
  REQUIRE_FALSE(s);
  CHECK(s.error().code() == ErrorCode::kIo);
  CHECK(s.error().message().find("/nonexistent-embedrt-dir") != std::string::npos);
}

TEST_CASE("a full disk fails cleanly and leaves the previous file intact") {
  TempDir dir;
  const std::string mount_point = dir.file("small");
  std::filesystem::create_directory(mount_point);
  if (::geteuid() != 0 || ::mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=256k") != 0) {
    MESSAGE("cannot mount a small tmpfs here (needs root): full-disk test skipped");
    return;
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount(path.c_str()); }
  } unmount{mount_point};

  const std::string path = mount_point + "/m.embt";
  REQUIRE(write_simple(path, 5.0f));
  std::vector<float> big(1024 * 1024, 1.0f);  // 4 MiB: cannot fit in 256 KiB
  const TableData table{{"tok", Role::kToken, DType::kF32, 1024, 1024}, std::as_bytes(std::span(big))};
  const Status s = write_table_file(path, {&table, 1}, Metadata{}, {.overwrite = true});
  REQUIRE_FALSE(s);
  CHECK(s.error().code() == ErrorCode::kNoSpace);
  INFO(s.error().message());
  CHECK(s.error().message().find("m.embt") != std::string::npos);
  CHECK(first_value(path) == 5.0f);  // the old file is untouched
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(mount_point)) names.push_back(e.path().filename());
  CHECK(names == std::vector<std::string>{"m.embt"});
}
