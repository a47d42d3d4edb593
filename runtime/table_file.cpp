// The .embt reader. Every number read from the file is range-checked with overflow-checked
// arithmetic before it is used to compute an address, in the order of docs/FORMAT.md: header
// fields that give the structure, then the header checksum, then the metadata and directory.
#include "embedrt/table_file.hpp"

#include <algorithm>
#include <cstring>
#include <set>
#include <string>

#include "byte_io.hpp"
#include "checksum.hpp"
#include "layout.hpp"
#include "embedrt/mapped_file.hpp"
#include "metadata_codec.hpp"
#include "utf8.hpp"

namespace embedrt {

namespace {
// What parsing a file yields; views point into the mapping.
struct ParsedFile {
  std::uint16_t version_major = 0;
  std::uint16_t version_minor = 0;
  Metadata metadata;
  std::vector<TableView> tables;
};
}  // namespace

struct TableFile::Impl {
  std::string path;
  MappedFile mapping;
  ParsedFile parsed;
};

namespace {

using detail::checked_add;
using detail::checked_align_up;
using detail::checked_mul;
using detail::load_le;
namespace hdr = detail::header;
namespace ent = detail::entry;

std::string hex_bytes(const std::byte* p, std::size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += digits[std::to_integer<unsigned>(p[i]) >> 4];
    s += digits[std::to_integer<unsigned>(p[i]) & 15];
  }
  return s;
}

std::string hex64(std::uint64_t v) {
  char buffer[19];
  std::snprintf(buffer, sizeof buffer, "0x%016llx", static_cast<unsigned long long>(v));
  return buffer;
}

class Parser {
 public:
  Parser(const std::string& path, std::span<const std::byte> file) : path_(path), file_(file) {}

  Status parse(ParsedFile& out);

 private:
  Error fail(ErrorCode code, const std::string& what) const {
    return Error(code, "'" + path_ + "': " + what);
  }
  Error malformed(const std::string& what) const { return fail(ErrorCode::kMalformed, what); }

  Status check_magic() const;
  Status parse_entry(std::size_t index, const std::byte* entry, std::uint64_t& cursor, TableView& table) const;

  const std::string path_;
  std::uint16_t major_ = 0;  // the file's version_major, once read
  std::span<const std::byte> file_;
};

Status Parser::check_magic() const {
  const auto& magic = detail::kMagic;
  if (file_.size() >= magic.size() && std::memcmp(file_.data(), magic.data(), magic.size()) == 0) {
    return {};
  }
  const std::size_t n = std::min(file_.size(), magic.size());
  std::string what = "not an .embt file: magic is [" + hex_bytes(file_.data(), n) +
                     "], expected [89 45 4d 42 0d 0a 1a 0a]";
  // "\x89EMB" intact but the line-ending bytes changed: a text-mode transfer.
  if (file_.size() >= 4 && std::memcmp(file_.data(), magic.data(), 4) == 0) {
    what += " (line endings changed: was the file transferred in text mode?)";
  }
  return fail(ErrorCode::kBadMagic, what);
}

Status Parser::parse(ParsedFile& out) {
  if (Status s = check_magic(); !s) return s;
  const std::uint64_t size = file_.size();
  if (size < hdr::kSize + detail::kFooterSize) {
    return malformed("truncated: file is " + std::to_string(size) + " bytes, the header alone is " +
                     std::to_string(hdr::kSize));
  }
  const std::byte* h = file_.data();
  out.version_major = load_le<std::uint16_t>(h + hdr::kVersionMajor);
  out.version_minor = load_le<std::uint16_t>(h + hdr::kVersionMinor);
  major_ = out.version_major;
  if (out.version_major < kOldestVersionMajor || out.version_major > kFormatVersionMajor) {
    // FORMAT.md 8: another major is refused, naming the file's version and the reader's.
    return fail(ErrorCode::kUnsupportedVersion,
                "version_major is " + std::to_string(out.version_major) + " (file version " +
                    std::to_string(out.version_major) + "." + std::to_string(out.version_minor) +
                    "), this reader implements version " + std::to_string(kFormatVersionMajor) + "." +
                    std::to_string(kFormatVersionMinor) + " and reads only " +
                    std::to_string(kOldestVersionMajor) + ".x to " + std::to_string(kFormatVersionMajor) + ".x files");
  }
  const auto file_size = load_le<std::uint64_t>(h + hdr::kFileSize);
  if (file_size != size) {
    return malformed("file_size field is " + std::to_string(file_size) + " but the file is " +
                     std::to_string(size) + " bytes" +
                     (size < file_size ? " (truncated)" : " (trailing bytes)"));
  }
  const auto header_size = load_le<std::uint32_t>(h + hdr::kHeaderSize);
  if (header_size < hdr::kSize || header_size % 8 != 0 || header_size > size) {
    return malformed("header_size is " + std::to_string(header_size) +
                     ", expected a multiple of 8, at least 128 and within the file");
  }
  const auto table_count = load_le<std::uint32_t>(h + hdr::kTableCount);
  if (table_count > detail::kMaxTables) {
    return malformed("table_count is " + std::to_string(table_count) + ", the limit is " +
                     std::to_string(detail::kMaxTables));
  }
  const auto entry_size = load_le<std::uint32_t>(h + hdr::kEntrySize);
  if (entry_size < ent::kSize || entry_size % 8 != 0 || entry_size > (1u << 20)) {
    return malformed("directory_entry_size is " + std::to_string(entry_size) +
                     ", expected a multiple of 8 between 128 and 1 MiB");
  }
  const auto directory_offset = load_le<std::uint64_t>(h + hdr::kDirectoryOffset);
  if (directory_offset != header_size) {
    return malformed("directory_offset is " + std::to_string(directory_offset) +
                     ", expected header_size " + std::to_string(header_size));
  }
  // table_count <= 2^16 and entry_size <= 2^20: the product fits easily; the sums are checked.
  const std::uint64_t directory_end = directory_offset + std::uint64_t{table_count} * entry_size;
  const auto metadata_offset = load_le<std::uint64_t>(h + hdr::kMetadataOffset);
  if (metadata_offset != directory_end) {
    return malformed("metadata_offset is " + std::to_string(metadata_offset) +
                     ", expected the end of the directory at " + std::to_string(directory_end));
  }
  const auto metadata_size = load_le<std::uint64_t>(h + hdr::kMetadataSize);
  if (metadata_size % 8 != 0 || metadata_size > detail::kMaxMetadataSize) {
    return malformed("metadata_size is " + std::to_string(metadata_size) +
                     ", expected a multiple of 8 up to 16 MiB");
  }
  const auto front_end = checked_add(metadata_offset, metadata_size);
  if (!front_end || *front_end > size - detail::kFooterSize) {
    return malformed("directory and metadata (" + std::to_string(table_count) + " tables, " +
                     std::to_string(metadata_size) + " metadata bytes) run past the end of the file (" +
                     std::to_string(size) + " bytes)");
  }

  const auto stored = load_le<std::uint64_t>(h + hdr::kChecksum);
  const auto computed = detail::checksum2(file_.subspan(0, hdr::kChecksum),
                                          file_.subspan(hdr::kSize, *front_end - hdr::kSize));
  if (stored != computed) {
    return fail(ErrorCode::kChecksumMismatch, "header_checksum is " + hex64(stored) +
                                                  " but header, directory and metadata hash to " +
                                                  hex64(computed));
  }
  if (std::memcmp(file_.data() + size - detail::kFooterSize, detail::kFooter.data(),
                  detail::kFooterSize) != 0) {
    return malformed("footer is [" + hex_bytes(file_.data() + size - detail::kFooterSize, 8) +
                     "], expected 'EMBT-END' (truncated or appended to?)");
  }

  auto metadata = detail::decode_metadata(file_.subspan(metadata_offset, metadata_size));
  if (!metadata) return malformed(metadata.error().message());
  out.metadata = std::move(*metadata);

  out.tables.resize(table_count);
  std::set<std::string, std::less<>> names;
  std::set<Role> roles;
  std::uint64_t cursor = *front_end;
  for (std::size_t i = 0; i < table_count; ++i) {
    TableView& t = out.tables[i];
    const std::byte* entry = file_.data() + header_size + i * std::uint64_t{entry_size};
    if (Status s = parse_entry(i, entry, cursor, t); !s) return s;
    if (!names.insert(t.name).second) {
      return malformed("table " + std::to_string(i) + ": duplicate name '" + t.name + "'");
    }
    if (t.role != Role::kOther && !roles.insert(t.role).second) {
      return malformed("table " + std::to_string(i) + " ('" + t.name + "'): a second table with role " +
                       std::string(role_name(t.role)));
    }
  }
  if (cursor != size - detail::kFooterSize) {
    return malformed("data ends at " + std::to_string(cursor) + " but the footer starts at " +
                     std::to_string(size - detail::kFooterSize) + " (bytes not covered by any table)");
  }
  return {};
}

Status Parser::parse_entry(std::size_t index, const std::byte* e, std::uint64_t& cursor, TableView& t) const {
  const std::string where = "table " + std::to_string(index);

  const char* name = reinterpret_cast<const char*>(e + ent::kName);
  const std::size_t name_length = strnlen(name, ent::kNameField);
  if (name_length == 0 || name_length > kMaxNameBytes) {
    return malformed(where + ": name must be 1 to 63 bytes followed by NUL padding");
  }
  for (std::size_t i = name_length; i < ent::kNameField; ++i) {
    if (name[i] != '\0') return malformed(where + ": name has bytes after its NUL terminator");
  }
  t.name.assign(name, name_length);
  if (!detail::valid_utf8(t.name)) {
    return malformed(where + ": name is not valid UTF-8 (bytes [" +
                     hex_bytes(reinterpret_cast<const std::byte*>(name), name_length) + "])");
  }
  const std::string named = where + " ('" + t.name + "')";

  const auto role = load_le<std::uint32_t>(e + ent::kRole);
  t.role = role <= static_cast<std::uint32_t>(Role::kNormBias) ? static_cast<Role>(role) : Role::kOther;
  const auto dtype = load_le<std::uint32_t>(e + ent::kDType);
  // A dtype of a later major than the file's is as unknown to it as a reserved one (FORMAT.md 8).
  constexpr auto kLast = static_cast<std::uint32_t>(DType::kInt4Rowwise);
  if (dtype < static_cast<std::uint32_t>(DType::kF32) || dtype > kLast ||
      dtype_version(static_cast<DType>(dtype)).major > major_) {
    return malformed(named + ": unknown dtype " + std::to_string(dtype) + (dtype <= kLast ? " (a 2.0 dtype in a 1.x file)" : ""));
  }
  t.dtype = static_cast<DType>(dtype);
  t.rows = load_le<std::uint64_t>(e + ent::kRows);
  t.dim = load_le<std::uint64_t>(e + ent::kDim);
  t.row_stride = load_le<std::uint64_t>(e + ent::kRowStride);
  t.offset = load_le<std::uint64_t>(e + ent::kOffset);
  const auto data_size = load_le<std::uint64_t>(e + ent::kDataSize);
  t.checksum = load_le<std::uint64_t>(e + ent::kChecksum);

  if (t.rows == 0) return malformed(named + ": rows is 0");
  if (t.dim == 0 || t.dim > kMaxDim) {
    return malformed(named + ": dim is " + std::to_string(t.dim) + ", expected 1 to " +
                     std::to_string(kMaxDim));
  }
  const std::uint64_t needed = row_bytes(t.dtype, t.dim);
  if (t.row_stride % kRowAlignment != 0 || t.row_stride < needed) {
    return malformed(named + ": row_stride is " + std::to_string(t.row_stride) +
                     ", expected a multiple of 64 and at least " + std::to_string(needed) +
                     " for " + std::string(dtype_name(t.dtype)) + " x " + std::to_string(t.dim));
  }
  const auto expected_size = checked_mul(t.rows, t.row_stride);
  if (!expected_size || data_size != *expected_size) {
    return malformed(named + ": size is " + std::to_string(data_size) + ", expected rows " +
                     std::to_string(t.rows) + " x row_stride " + std::to_string(t.row_stride) +
                     (expected_size ? " = " + std::to_string(*expected_size) : " (overflows)"));
  }
  if (t.offset % kTableAlignment != 0) {
    return malformed(named + ": offset " + std::to_string(t.offset) +
                     " is not a multiple of 4096");
  }
  const auto expected_offset = checked_align_up(cursor, kTableAlignment);
  if (!expected_offset || t.offset != *expected_offset) {
    return malformed(named + ": offset is " + std::to_string(t.offset) + ", expected " +
                     std::to_string(expected_offset.value_or(0)) +
                     (t.offset < cursor ? " (overlaps the previous region)" : " (leaves a hole)"));
  }
  const auto end = checked_add(t.offset, data_size);
  if (!end || *end > file_.size() - detail::kFooterSize) {
    return malformed(named + ": data [" + std::to_string(t.offset) + ", +" +
                     std::to_string(data_size) + ") runs past the end of the file (" +
                     std::to_string(file_.size()) + " bytes)");
  }
  t.bytes = file_.subspan(t.offset, data_size);
  cursor = *end;
  return {};
}

}  // namespace

Result<TableFile> TableFile::open(const std::string& path, const OpenOptions& options) {
  auto mapping = MappedFile::map(path, options);
  if (!mapping) return std::move(mapping).error();
  auto impl = std::make_shared<Impl>(Impl{path, std::move(*mapping), {}});
  Parser parser(impl->path, impl->mapping.bytes());
  if (Status s = parser.parse(impl->parsed); !s) {
    return Error(s.error().code(), s.error().message(), {.file = path});
  }
  return TableFile(std::move(impl));
}

const std::string& TableFile::path() const noexcept { return impl_->path; }
std::uint64_t TableFile::file_size() const noexcept { return impl_->mapping.bytes().size(); }
std::uint16_t TableFile::version_major() const noexcept { return impl_->parsed.version_major; }
std::uint16_t TableFile::version_minor() const noexcept { return impl_->parsed.version_minor; }
const Metadata& TableFile::metadata() const noexcept { return impl_->parsed.metadata; }
Residency TableFile::residency() const noexcept { return impl_->mapping.residency(); }
const FileStamp& TableFile::stamp() const noexcept { return impl_->mapping.stamp(); }
std::span<const TableView> TableFile::tables() const noexcept { return impl_->parsed.tables; }

const TableView* TableFile::find(std::string_view name) const noexcept {
  for (const TableView& t : impl_->parsed.tables) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const TableView* TableFile::find(Role role) const noexcept {
  if (role == Role::kOther) return nullptr;
  for (const TableView& t : impl_->parsed.tables) {
    if (t.role == role) return &t;
  }
  return nullptr;
}

Status TableFile::verify_table(const TableView& t) const {
  const std::uint64_t computed = detail::checksum(t.bytes);
  if (computed != t.checksum) {
    return Error(ErrorCode::kChecksumMismatch,
                 "'" + impl_->path + "': table '" + t.name + "': data checksum is " + hex64(computed) +
                     ", the directory says " + hex64(t.checksum),
                 {.file = impl_->path, .offset = t.offset, .tensor = t.name, .field = "data_checksum"});
  }
  return {};
}

// FORMAT.md 4: the bytes of a row past row_bytes (up to row_stride) are zero. The data checksum
// covers them, so this only catches a writer that breaks the rule. (The code padding inside an
// int8_rowwise row, between dim and align_up(dim, 4), is written as zero but not checked: FORMAT.md
// 4.2 says readers ignore it.)
namespace {
Status verify_row_padding(const std::string& path, const TableView& t) {
  const std::uint64_t used = row_bytes(t.dtype, t.dim);
  if (used == t.row_stride) return {};
  for (std::uint64_t r = 0; r < t.rows; ++r) {
    const std::byte* row = t.bytes.data() + r * t.row_stride;
    for (std::uint64_t i = used; i < t.row_stride; ++i) {
      if (row[i] != std::byte{0}) {
        const std::uint64_t at = t.offset + r * t.row_stride + i;
        return Error(ErrorCode::kMalformed,
                     "'" + path + "': table '" + t.name + "': row " + std::to_string(r) + " padding byte " +
                         std::to_string(i) + " (file offset " + std::to_string(at) +
                         ") is not zero: bytes of a row past row_bytes must be zero",
                     {.file = path, .offset = at, .tensor = t.name, .field = "row_stride"});
      }
    }
  }
  return {};
}
}  // namespace

std::uint64_t TableFile::lost_pages() const noexcept { return impl_->mapping.faults(); }

Error TableFile::damaged_error() const {
  return Error(ErrorCode::kIo,
               "the model file '" + impl_->path + "' was truncated or rewritten in place while mapped (" +
                   std::to_string(lost_pages()) + " pages lost); its data can no longer be trusted: reopen it",
               {.file = impl_->path});
}

Status TableFile::verify() const {
  // A truncation during the checks below zero-fills pages; checked at the end too.
  if (lost_pages() != 0) return damaged_error();
  if (Status s = verify_contents(); !s) return lost_pages() != 0 ? Status(damaged_error()) : s;
  if (lost_pages() != 0) return damaged_error();
  return {};
}

Status TableFile::verify_contents() const {
  // Padding between regions is not covered by any checksum: check that it is zero.
  const auto file = impl_->mapping.bytes();
  const std::byte* h = file.data();
  std::uint64_t cursor = load_le<std::uint64_t>(h + hdr::kMetadataOffset) +
                         load_le<std::uint64_t>(h + hdr::kMetadataSize);
  for (const TableView& t : impl_->parsed.tables) {
    for (std::uint64_t i = cursor; i < t.offset; ++i) {
      if (file[i] != std::byte{0}) {
        return Error(ErrorCode::kMalformed,
                     "'" + impl_->path + "': padding byte at offset " + std::to_string(i) + " before table '" +
                         t.name + "' is not zero",
                     {.file = impl_->path, .offset = i, .tensor = t.name});
      }
    }
    if (Status s = verify_table(t); !s) return s;
    if (Status s = verify_row_padding(impl_->path, t); !s) return s;
    cursor = t.offset + t.bytes.size();
  }
  return {};
}

}  // namespace embedrt
