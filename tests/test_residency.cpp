// Residency modes (OpenOptions::residency): each holds the same bytes and gives the same
// embeddings; a copy is placed for huge pages and no change to the file reaches it.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "embedrt/embedder.hpp"
#include "embedrt/embedrt.hpp"
#include "support/temp_dir.hpp"

using namespace embedrt;
using embedrt::test::TempDir;

namespace {

constexpr Residency kAll[] = {Residency::kMmap, Residency::kPopulate, Residency::kCopy};

// GPT-2-like: token and position tables, 1 MiB of token rows (past the first pages).
void write_model(const std::string& path, float offset, std::uint64_t vocab = 4096) {
  const std::uint64_t dim = 64, context = 16;
  std::vector<float> tok(vocab * dim), pos(context * dim);
  for (std::size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<float>(i % 97) * 0.25f + offset;
  for (std::size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<float>(i % 13) * 0.5f;
  Metadata meta;
  meta.position_kind = PositionKind::kLearned;
  const TableData tables[] = {{{"tok", Role::kToken, DType::kF32, vocab, dim}, std::as_bytes(std::span(tok))},
                              {{"pos", Role::kPosition, DType::kF32, context, dim}, std::as_bytes(std::span(pos))}};
  REQUIRE(write_table_file(path, tables, meta));
}

std::vector<float> embed(const Model& model, std::vector<std::int64_t> ids) {
  auto embedder = Embedder::create(model);
  REQUIRE(embedder);
  std::vector<float> out(ids.size() * model.dim());
  EmbedRequest request;
  request.ids = ids;
  const Status s = embedder->embed(request, OutputSpan(out));
  REQUIRE_MESSAGE(s, (s ? "" : s.error().message()));
  return out;
}

void truncate_file(const std::string& path, off_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, size) == 0);
  ::close(fd);
}

// Bytes of this process's page tables that map the mapping holding `p` (smaps' Rss), or -1.
long long mapped_bytes_at(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long long begin = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= at && at < end;
    } else if (inside && line.rfind("Rss:", 0) == 0) {
      return std::stoll(line.substr(4)) * 1024;
    }
  }
  return -1;
}

}  // namespace

TEST_CASE("populate maps every page of the file at open; mmap maps only what open reads") {
  TempDir dir;
  const std::string path = dir.file("m.embt");
  write_model(path, 0.0f, 65536);  // 16 MiB of rows: 8 huge pages, of which open reads the first and the last
  for (Residency r : {Residency::kMmap, Residency::kPopulate}) {
    CAPTURE(residency_name(r));
    auto file = TableFile::open(path, {.residency = r});
    REQUIRE(file);
    const auto& table = file->tables().front();
    const long long mapped = mapped_bytes_at(table.bytes.data());
    REQUIRE(mapped >= 0);
    if (r == Residency::kPopulate) {
      CHECK(mapped >= static_cast<long long>(file->file_size() / 4096 * 4096));
    } else if (::sysconf(_SC_PAGESIZE) == 4096) {  // (larger base pages may come in larger folios)
      // Open reads the header, directory and metadata (the file's first and last pages), which
      // may be mapped a whole 2 MiB folio each, not the rows between.
      CHECK(mapped <= static_cast<long long>(6) << 20);
    }
  }
}

TEST_CASE("residency names: each parses back to itself; anything else is refused") {
  for (Residency r : kAll) CHECK(parse_residency(residency_name(r)) == r);
  CHECK(residency_name(Residency::kMmap) == "mmap");
  CHECK(residency_name(Residency::kPopulate) == "populate");
  CHECK(residency_name(Residency::kCopy) == "copy");
  for (const char* bad : {"", "Copy", "mmap ", "huge", "lock"}) CHECK_FALSE(parse_residency(bad));
}

TEST_CASE("every residency holds the file's bytes and gives the same embeddings") {
  TempDir dir;
  const std::string path = dir.file("m.embt");
  write_model(path, 0.0f);
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> file_bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<std::int64_t> ids = {0, 1, 2048, 4095, 7, 7, 3000, 12};
  std::vector<float> expected;
  for (Residency r : kAll) {
    CAPTURE(residency_name(r));
    auto model = Model::open(path, {.residency = r});
    REQUIRE(model);
    CHECK(model->file().residency() == r);
    const auto tables = model->file().tables();
    // The views cover the same bytes at the same offsets in every mode.
    for (const TableView& t : tables) {
      REQUIRE(t.offset + t.bytes.size() <= file_bytes.size());
      CHECK(std::memcmp(t.bytes.data(), file_bytes.data() + t.offset, t.bytes.size()) == 0);
    }
    CHECK(model->file().verify());
    const auto out = embed(*model, ids);
    if (expected.empty()) {
      expected = out;
    } else {
      CHECK(out == expected);
    }
  }
}

TEST_CASE("a copy starts on a huge-page boundary") {
  TempDir dir;
  const std::string path = dir.file("m.embt");
  write_model(path, 0.0f);
  auto file = TableFile::open(path, {.residency = Residency::kCopy});
  REQUIRE(file);
  // The file's byte 0 is the copy's first byte: tables (4096-aligned in the file) sit at the same
  // offsets from a 2 MiB boundary, so a table larger than 2 MiB is backed by huge pages where THP allows.
  const auto* first = file->tables().front().bytes.data() - file->tables().front().offset;
  CHECK(reinterpret_cast<std::uintptr_t>(first) % (std::uintptr_t{2} << 20) == 0);
}

TEST_CASE("a copy is immune to the file being truncated, rewritten or removed") {
  TempDir dir;
  const std::string path = dir.file("m.embt");
  write_model(path, 0.0f);
  auto model = Model::open(path, {.residency = Residency::kCopy});
  REQUIRE(model);
  const std::vector<std::int64_t> ids = {1, 2000, 4095};
  const auto before = embed(*model, ids);

  SUBCASE("truncated to nothing") { truncate_file(path, 0); }
  SUBCASE("truncated mid-table") { truncate_file(path, 256 * 1024); }
  SUBCASE("rewritten in place with other values") {
    const std::string other = dir.file("other.embt");
    write_model(other, 1000.0f);
    std::ifstream in(other, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fstream out(path, std::ios::binary | std::ios::in | std::ios::out);  // same inode, no truncation
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  SUBCASE("removed") { std::filesystem::remove(path); }

  CHECK(model->file().lost_pages() == 0);
  CHECK(embed(*model, ids) == before);
  CHECK(model->file().verify());
}

TEST_CASE("a shared mapping does see a rewrite in place (what copy mode protects against)") {
  TempDir dir;
  const std::string path = dir.file("m.embt");
  write_model(path, 0.0f);
  auto model = Model::open(path, {.residency = Residency::kMmap});
  REQUIRE(model);
  const std::vector<std::int64_t> ids = {1, 2000, 4095};
  const auto before = embed(*model, ids);
  const std::string other = dir.file("other.embt");
  write_model(other, 1000.0f);
  std::ifstream in(other, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  {
    std::fstream out(path, std::ios::binary | std::ios::in | std::ios::out);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  CHECK(embed(*model, ids) != before);
}

TEST_CASE("copying a file that is not a model is refused like mapping it") {
  TempDir dir;
  const std::string path = dir.file("junk.embt");
  std::ofstream(path) << "not a model at all, but long enough to hold a header of some sort....";
  for (Residency r : kAll) {
    auto file = TableFile::open(path, {.residency = r});
    REQUIRE_FALSE(file);
    CHECK(file.error().code() == ErrorCode::kBadMagic);
    CHECK(file.error().message().find(path) != std::string::npos);
  }
  auto missing = TableFile::open(dir.file("missing.embt"), {.residency = Residency::kCopy});
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code() == ErrorCode::kNotFound);
}

TEST_CASE("a file's stamp names the file that was opened, whatever the path names later") {
  TempDir dir;
  const std::string path = dir.file("m.embt");
  for (Residency r : kAll) {
    CAPTURE(residency_name(r));
    write_model(path, 0.0f);
    auto file = TableFile::open(path, {.residency = r});
    REQUIRE(file);
    const FileStamp opened = file->stamp();
    const auto now = FileStamp::of(path);
    REQUIRE(now);
    CHECK(*now == opened);
    CHECK(opened.size == file->file_size());
    CHECK(opened.inode != 0);
    const TableFile copy = *file;  // copies share the mapping, stamp included
    CHECK(copy.stamp() == opened);

    // Touched in place: the same inode with new times.
    std::filesystem::last_write_time(path, std::filesystem::last_write_time(path) + std::chrono::seconds(5));
    const auto touched = FileStamp::of(path);
    REQUIRE(touched);
    CHECK(touched->same_file(opened));
    CHECK(*touched != opened);

    // Replaced by rename: another inode at the path.
    const std::string other = dir.file("other.embt");
    write_model(other, 1000.0f);
    std::filesystem::rename(other, path);
    const auto replaced = FileStamp::of(path);
    REQUIRE(replaced);
    CHECK_FALSE(replaced->same_file(opened));

    std::filesystem::remove(path);
    CHECK_FALSE(FileStamp::of(path));
    CHECK(file->stamp() == opened);  // the opened file's stamp, as it was
  }
}
