// Damaged and hostile .embt files: each must give an error value that names the field and the
// offending value; none may crash or read outside the mapping (run under ASan/UBSan too).
#include <doctest/doctest.h>

#include <random>

#include "embedrt/embedrt.hpp"
#include "support/raw_file.hpp"
#include "support/temp_dir.hpp"

using namespace embedrt;
using embedrt::test::RawFile;
using embedrt::test::TempDir;
namespace field = embedrt::test::field;

namespace {

struct Fixture {
  TempDir dir;
  RawFile good;

  Fixture() {
    std::vector<float> tok(50 * 17, 0.25f);
    std::vector<std::uint16_t> pos(20 * 17, 0x3c00);
    std::vector<std::byte> other(3 * row_bytes(DType::kInt8Rowwise, 3), std::byte{1});
    const TableData tables[] = {
        {{"tok", Role::kToken, DType::kF32, 50, 17}, std::as_bytes(std::span(tok))},
        {{"pos", Role::kPosition, DType::kF16, 20, 17}, std::as_bytes(std::span(pos))},
        {{"extra", Role::kOther, DType::kInt8Rowwise, 3, 3}, other},
    };
    Metadata meta;
    meta.family = "gpt2";
    meta.position_kind = PositionKind::kLearned;
    const std::string path = dir.file("good.embt");
    REQUIRE(write_table_file(path, tables, meta));
    good.bytes = test::read_file(path);
  }

  Result<TableFile> open(const RawFile& raw) {
    const std::string path = dir.file("bad.embt");
    test::write_file(path, raw.bytes);
    return TableFile::open(path);
  }

  // Opens `raw` and checks the error's code and that its message contains `needle`.
  void expect(const RawFile& raw, ErrorCode code, const std::string& needle) {
    auto file = open(raw);
    REQUIRE_FALSE(file);
    CHECK(file.error().code() == code);
    INFO(file.error().message());
    CHECK(file.error().message().find(needle) != std::string::npos);
  }
};

}  // namespace

TEST_CASE_FIXTURE(Fixture, "the unmodified fixture opens and verifies") {
  auto file = open(good);
  REQUIRE(file);
  CHECK(file->verify());
  CHECK(file->tables().size() == 3);
}

TEST_CASE_FIXTURE(Fixture, "magic") {
  for (std::size_t i = 0; i < 8; ++i) {
    RawFile bad = good;
    bad.bytes[i] ^= 0x20;
    expect(bad, ErrorCode::kBadMagic, "magic");
  }
  SUBCASE("CRLF to LF conversion is recognised as text-mode damage") {
    RawFile bad = good;
    bad.bytes.erase(bad.bytes.begin() + 4);  // "\r\n" -> "\n"
    expect(bad, ErrorCode::kBadMagic, "text mode");
  }
  SUBCASE("not an embt file at all") {
    RawFile text;
    text.bytes.assign({'h', 'e', 'l', 'l', 'o'});
    expect(text, ErrorCode::kBadMagic, "not an .embt file");
  }
}

TEST_CASE_FIXTURE(Fixture, "empty file") {
  expect(RawFile{}, ErrorCode::kMalformed, "empty");
}

TEST_CASE_FIXTURE(Fixture, "versions: unknown majors refused, newer minors accepted, 1.x and 2.x read") {
  for (std::uint16_t major : {std::uint16_t{0}, std::uint16_t{3}, std::uint16_t{65535}}) {
    RawFile bad = good;
    bad.set<std::uint16_t>(8, major);
    bad.reseal();
    expect(bad, ErrorCode::kUnsupportedVersion,
           "version_major is " + std::to_string(major) + " (file version " + std::to_string(major) +
               ".0), this reader implements version 2.0 and reads only 1.x to 2.x files");
  }
  RawFile two = good;
  two.set<std::uint16_t>(8, 2);
  two.reseal();
  CHECK(open(two));

  RawFile newer = good;
  newer.set<std::uint16_t>(10, 9);
  newer.reseal();
  auto file = open(newer);
  REQUIRE(file);
  CHECK(file->version_minor() == 9);
}

TEST_CASE_FIXTURE(Fixture, "each header field") {
  struct Case {
    const char* name;
    std::size_t offset;
    std::uint64_t value;
    int width;
    ErrorCode code;
    const char* needle;
  };
  const std::uint64_t size = good.bytes.size();
  const Case cases[] = {
      {"header_size small", 12, 120, 4, ErrorCode::kMalformed, "header_size is 120"},
      {"header_size unaligned", 12, 129, 4, ErrorCode::kMalformed, "header_size is 129"},
      {"header_size huge", 12, 0xfffffff8u, 4, ErrorCode::kMalformed, "header_size is 4294967288"},
      {"file_size short", 16, size - 1, 8, ErrorCode::kMalformed, "trailing bytes"},
      {"file_size long", 16, size + 1, 8, ErrorCode::kMalformed, "truncated"},
      {"table_count huge", 24, 70000, 4, ErrorCode::kMalformed, "table_count is 70000"},
      {"table_count off by one", 24, 4, 4, ErrorCode::kMalformed, "metadata_offset"},
      {"entry size small", 28, 64, 4, ErrorCode::kMalformed, "directory_entry_size is 64"},
      {"directory offset", 32, 256, 8, ErrorCode::kMalformed, "directory_offset is 256"},
      {"metadata offset", 40, 1024, 8, ErrorCode::kMalformed, "metadata_offset is 1024"},
      {"metadata size unaligned", 48, 13, 8, ErrorCode::kMalformed, "metadata_size is 13"},
      {"metadata size huge", 48, std::uint64_t{1} << 40, 8, ErrorCode::kMalformed, "metadata_size is"},
      {"metadata past file", 48, 16u << 20, 8, ErrorCode::kMalformed, "run past the end"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    RawFile bad = good;
    if (c.width == 4) bad.set<std::uint32_t>(c.offset, static_cast<std::uint32_t>(c.value));
    if (c.width == 8) bad.set<std::uint64_t>(c.offset, c.value);
    bad.reseal();
    expect(bad, c.code, c.needle);
  }
}

TEST_CASE_FIXTURE(Fixture, "header checksum catches an unsealed change anywhere in the front matter") {
  const std::uint64_t front_end = good.get<std::uint64_t>(40) + good.get<std::uint64_t>(48);
  for (std::size_t i = 56; i < front_end; i += 7) {
    if (i >= 120 && i < 128) continue;  // the checksum itself
    RawFile bad = good;
    bad.bytes[i] ^= 0x01;
    expect(bad, ErrorCode::kChecksumMismatch, "header_checksum");
  }
  RawFile bad = good;
  bad.bytes[121] ^= 0x80;
  expect(bad, ErrorCode::kChecksumMismatch, "header_checksum");
}

TEST_CASE_FIXTURE(Fixture, "truncation at every offset of the front matter and across the data") {
  std::vector<std::size_t> cuts;
  for (std::size_t n = 0; n < 1024 && n < good.bytes.size(); ++n) cuts.push_back(n);
  for (std::size_t n = 1024; n < good.bytes.size(); n += 509) cuts.push_back(n);
  cuts.push_back(good.bytes.size() - 1);
  for (std::size_t n : cuts) {
    CAPTURE(n);
    RawFile bad;
    bad.bytes.assign(good.bytes.begin(), good.bytes.begin() + static_cast<std::ptrdiff_t>(n));
    auto file = open(bad);
    REQUIRE_FALSE(file);
    const ErrorCode code = file.error().code();
    CHECK((code == ErrorCode::kBadMagic || code == ErrorCode::kMalformed));
  }
}

TEST_CASE_FIXTURE(Fixture, "appended bytes") {
  RawFile bad = good;
  bad.bytes.insert(bad.bytes.end(), 8, 0);
  expect(bad, ErrorCode::kMalformed, "trailing bytes");
  // Even with file_size updated, the footer is no longer at the end.
  bad.set<std::uint64_t>(16, bad.bytes.size());
  bad.reseal();
  expect(bad, ErrorCode::kMalformed, "footer");
}

TEST_CASE_FIXTURE(Fixture, "a damaged footer") {
  RawFile bad = good;
  bad.bytes.back() = 'X';
  expect(bad, ErrorCode::kMalformed, "footer");
}

TEST_CASE_FIXTURE(Fixture, "directory entries") {
  const std::size_t e0 = RawFile::entry(0), e1 = RawFile::entry(1);
  const std::uint64_t tok_offset = good.get<std::uint64_t>(e0 + field::kOffset);
  const std::uint64_t pos_offset = good.get<std::uint64_t>(e1 + field::kOffset);
  struct Case {
    const char* name;
    std::size_t offset;
    std::uint64_t value;
    int width;
    const char* needle;
  };
  const Case cases[] = {
      {"unknown dtype", e0 + field::kDType, 9, 4, "unknown dtype 9"},
      {"dtype zero", e0 + field::kDType, 0, 4, "unknown dtype 0"},
      {"zero rows", e0 + field::kRows, 0, 8, "rows is 0"},
      {"zero dim", e0 + field::kDim, 0, 8, "dim is 0"},
      {"huge dim", e0 + field::kDim, std::uint64_t{1} << 40, 8, "dim is 1099511627776"},
      {"stride not a multiple of 64", e0 + field::kRowStride, 96, 8, "row_stride is 96"},
      {"stride too small", e0 + field::kRowStride, 64, 8, "row_stride is 64"},
      {"size not rows x stride", e0 + field::kSize, 4096, 8, "size is 4096"},
      {"rows x stride overflows", e0 + field::kRows, std::uint64_t{1} << 60, 8, "overflows"},
      {"misaligned offset", e0 + field::kOffset, tok_offset + 64, 8, "not a multiple of 4096"},
      {"hole before a table", e0 + field::kOffset, tok_offset + 4096, 8, "leaves a hole"},
      {"overlapping tables", e1 + field::kOffset, tok_offset, 8, "overlaps"},
      {"offset past the file", e1 + field::kOffset, pos_offset + (std::uint64_t{1} << 40), 8, "leaves a hole"},
      {"offset wraps around", e1 + field::kOffset, ~std::uint64_t{4095}, 8, "expected"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    RawFile bad = good;
    if (c.width == 4) bad.set<std::uint32_t>(c.offset, static_cast<std::uint32_t>(c.value));
    if (c.width == 8) bad.set<std::uint64_t>(c.offset, c.value);
    bad.reseal();
    expect(bad, ErrorCode::kMalformed, c.needle);
  }
  SUBCASE("a table whose data runs into the footer") {
    RawFile bad = good;
    const std::size_t e2 = RawFile::entry(2);
    bad.set<std::uint64_t>(e2 + field::kRows, 4);
    bad.set<std::uint64_t>(e2 + field::kSize, 4 * bad.get<std::uint64_t>(e2 + field::kRowStride));
    bad.reseal();
    expect(bad, ErrorCode::kMalformed, "runs past the end");
  }
  SUBCASE("bytes after the last table") {
    RawFile bad = good;
    const std::size_t e2 = RawFile::entry(2);
    bad.set<std::uint64_t>(e2 + field::kRows, 2);
    bad.set<std::uint64_t>(e2 + field::kSize, 2 * bad.get<std::uint64_t>(e2 + field::kRowStride));
    bad.reseal();
    expect(bad, ErrorCode::kMalformed, "not covered by any table");
  }
}

TEST_CASE_FIXTURE(Fixture, "names and roles") {
  const std::size_t e0 = RawFile::entry(0), e1 = RawFile::entry(1);
  SUBCASE("empty name") {
    RawFile bad = good;
    bad.bytes[e0] = 0;
    bad.reseal();
    expect(bad, ErrorCode::kMalformed, "name must be 1 to 63 bytes");
  }
  SUBCASE("name without NUL") {
    RawFile bad = good;
    std::memset(bad.bytes.data() + e0, 'a', 64);
    bad.reseal();
    expect(bad, ErrorCode::kMalformed, "name must be 1 to 63 bytes");
  }
  SUBCASE("garbage after the NUL") {
    RawFile bad = good;
    bad.bytes[e0 + 40] = 'x';
    bad.reseal();
    expect(bad, ErrorCode::kMalformed, "after its NUL");
  }
  SUBCASE("duplicate name") {
    RawFile bad = good;
    std::memcpy(bad.bytes.data() + e1, "tok", 4);
    bad.reseal();
    expect(bad, ErrorCode::kMalformed, "duplicate name 'tok'");
  }
  SUBCASE("duplicate role") {
    RawFile bad = good;
    bad.set<std::uint32_t>(e1 + field::kRole, 1);
    bad.reseal();
    expect(bad, ErrorCode::kMalformed, "second table with role token");
  }
  SUBCASE("an unknown role reads as other") {
    RawFile odd = good;
    odd.set<std::uint32_t>(RawFile::entry(2) + field::kRole, 77);
    odd.reseal();
    auto file = open(odd);
    REQUIRE(file);
    CHECK(file->tables()[2].role == Role::kOther);
  }
}

TEST_CASE_FIXTURE(Fixture, "a flipped data byte passes open and fails verify, naming the table") {
  for (std::size_t table : {0u, 1u, 2u}) {
    RawFile bad = good;
    const std::uint64_t offset = good.get<std::uint64_t>(RawFile::entry(table) + field::kOffset);
    bad.bytes[offset + 5] ^= 0x10;
    auto file = open(bad);
    REQUIRE(file);
    const Status s = file->verify();
    REQUIRE_FALSE(s);
    CHECK(s.error().code() == ErrorCode::kChecksumMismatch);
    const char* names[] = {"'tok'", "'pos'", "'extra'"};
    CHECK(s.error().message().find(names[table]) != std::string::npos);
  }
  SUBCASE("non-zero padding between tables") {
    RawFile bad = good;
    const std::uint64_t pos_offset = good.get<std::uint64_t>(RawFile::entry(1) + field::kOffset);
    bad.bytes[pos_offset - 1] = 1;
    auto file = open(bad);
    REQUIRE(file);
    const Status s = file->verify();
    REQUIRE_FALSE(s);
    CHECK(s.error().message().find("padding byte") != std::string::npos);
  }
}

TEST_CASE_FIXTURE(Fixture, "random corruption never crashes") {
  std::mt19937 rng(2024);
  const std::uint64_t front_end = good.get<std::uint64_t>(40) + good.get<std::uint64_t>(48);
  std::uniform_int_distribution<std::size_t> where(0, front_end - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  int opened = 0;
  for (int i = 0; i < 3000; ++i) {
    RawFile bad = good;
    for (int k = 0; k < 1 + i % 4; ++k) bad.bytes[where(rng)] = static_cast<unsigned char>(byte(rng));
    if (i % 2) bad.reseal();  // half resealed, so the field checks behind the checksum run
    auto file = open(bad);
    if (file) {
      ++opened;
      (void)file->verify();
      (void)Model::from_file(*file);
    }
  }
  MESSAGE(opened << " of 3000 corrupted files still opened (changes to ignored or reserved bytes)");
}
