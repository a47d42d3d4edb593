#include "zip_archive.hpp"

#include <libdeflate.h>

#include <algorithm>
#include <set>

#include "byte_cursor.hpp"
#include "embedrt/mapped_file.hpp"

namespace embedrt::import {
namespace {

constexpr std::uint32_t kLocalSignature = 0x04034b50;
constexpr std::uint32_t kCentralSignature = 0x02014b50;
constexpr std::uint32_t kEndSignature = 0x06054b50;
constexpr std::uint32_t kZip64EndSignature = 0x06064b50;
constexpr std::uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr std::size_t kEndRecordSize = 22;
constexpr std::size_t kMaxEntries = 1u << 20;

struct EndOfCentralDirectory {
  std::uint64_t entry_count = 0;
  std::uint64_t directory_size = 0;
  std::uint64_t directory_offset = 0;
  std::uint64_t end_record_offset = 0;  // where the directory must end (zip64 record or end record)
};

class ZipParser {
 public:
  ZipParser(std::span<const std::byte> file, const std::string& label) : file_(file), label_(label) {}

  Error fail(const std::string& what) const {
    return Error(ErrorCode::kMalformed, "'" + label_ + "': zip: " + what);
  }

  Result<EndOfCentralDirectory> find_end() const;
  Status read_zip64_end(EndOfCentralDirectory& end, std::uint64_t end_offset) const;
  Status read_directory(const EndOfCentralDirectory& end, std::vector<ZipEntry>& entries) const;
  Status read_local_header(ZipEntry& entry, std::uint64_t size) const;

 private:
  std::span<const std::byte> file_;
  const std::string label_;
};

bool valid_entry_name(const std::string& name) {
  if (name.empty() || name.front() == '/' || name.find('\\') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    return false;
  }
  // No "." or ".." path component.
  std::size_t begin = 0;
  while (begin <= name.size()) {
    std::size_t end = name.find('/', begin);
    if (end == std::string::npos) end = name.size();
    const std::string_view part(name.data() + begin, end - begin);
    if (part == ".." || part == ".") return false;
    begin = end + 1;
  }
  return true;
}

Result<EndOfCentralDirectory> ZipParser::find_end() const {
  if (file_.size() < kEndRecordSize) {
    return fail("file is " + std::to_string(file_.size()) + " bytes, too short for an end record");
  }
  // The end record is the last 22 bytes plus a comment of up to 65535 bytes.
  const std::size_t lowest = file_.size() > kEndRecordSize + 65535 ? file_.size() - kEndRecordSize - 65535 : 0;
  for (std::size_t pos = file_.size() - kEndRecordSize + 1; pos-- > lowest;) {
    ByteCursor c(file_, pos);
    std::uint32_t signature = 0;
    c.read_le(signature);
    if (signature != kEndSignature) continue;
    std::uint16_t disk = 0, directory_disk = 0, disk_entries = 0, total_entries = 0, comment = 0;
    std::uint32_t directory_size = 0, directory_offset = 0;
    c.read_le(disk);
    c.read_le(directory_disk);
    c.read_le(disk_entries);
    c.read_le(total_entries);
    c.read_le(directory_size);
    c.read_le(directory_offset);
    c.read_le(comment);
    if (pos + kEndRecordSize + comment != file_.size()) continue;  // a signature inside data
    if (disk != 0 || directory_disk != 0 || disk_entries != total_entries) {
      return fail("multi-disk archives are not supported");
    }
    EndOfCentralDirectory end{total_entries, directory_size, directory_offset, pos};
    // torch (miniz) writes zip64 end records even for small archives; when present they are
    // authoritative and the central directory ends where they start.
    std::uint32_t locator = 0;
    const bool has_zip64 = pos >= 20 && ByteCursor(file_, pos - 20).read_le(locator) && locator == kZip64LocatorSignature;
    const bool needs_zip64 = total_entries == 0xffff || directory_size == 0xffffffffu || directory_offset == 0xffffffffu;
    if (has_zip64 || needs_zip64) {
      if (Status s = read_zip64_end(end, pos); !s) return std::move(s).error();
      if ((total_entries != 0xffff && total_entries != end.entry_count) ||
          (directory_offset != 0xffffffffu && directory_offset != end.directory_offset)) {
        return fail("zip64 end record disagrees with the end record");
      }
    }
    return end;
  }
  return fail("no end-of-central-directory record (not a zip archive, or truncated)");
}

Status ZipParser::read_zip64_end(EndOfCentralDirectory& end, std::uint64_t end_offset) const {
  if (end_offset < 20) return fail("zip64 locator missing before the end record");
  ByteCursor locator(file_, end_offset - 20);
  std::uint32_t signature = 0, disk = 0, disks = 0;
  std::uint64_t record_offset = 0;
  locator.read_le(signature);
  locator.read_le(disk);
  locator.read_le(record_offset);
  locator.read_le(disks);
  if (signature != kZip64LocatorSignature) return fail("zip64 locator missing before the end record");
  if (record_offset > end_offset - 20 || end_offset - 20 - record_offset < 56) {
    return fail("zip64 end record offset " + std::to_string(record_offset) + " is out of place");
  }
  ByteCursor c(file_, record_offset);
  std::uint64_t record_size = 0, disk_entries = 0, total_entries = 0, size = 0, offset = 0;
  std::uint32_t this_disk = 0, directory_disk = 0;
  std::uint16_t made_by = 0, needed = 0;
  c.read_le(signature);
  c.read_le(record_size);
  c.read_le(made_by);
  c.read_le(needed);
  c.read_le(this_disk);
  c.read_le(directory_disk);
  c.read_le(disk_entries);
  c.read_le(total_entries);
  c.read_le(size);
  c.read_le(offset);
  if (signature != kZip64EndSignature) return fail("bad zip64 end record signature");
  if (this_disk != 0 || directory_disk != 0 || disk_entries != total_entries) {
    return fail("multi-disk archives are not supported");
  }
  end.entry_count = total_entries;
  end.directory_size = size;
  end.directory_offset = offset;
  end.end_record_offset = record_offset;
  return {};
}

Status ZipParser::read_directory(const EndOfCentralDirectory& end, std::vector<ZipEntry>& entries) const {
  if (end.entry_count > kMaxEntries) {
    return fail("directory claims " + std::to_string(end.entry_count) + " entries (limit " +
                std::to_string(kMaxEntries) + ")");
  }
  if (end.directory_offset > end.end_record_offset ||
      end.directory_size != end.end_record_offset - end.directory_offset) {
    return fail("central directory [" + std::to_string(end.directory_offset) + ", +" +
                std::to_string(end.directory_size) + ") does not end where the end record starts (" +
                std::to_string(end.end_record_offset) + ")");
  }
  ByteCursor c(file_.subspan(0, end.end_record_offset), end.directory_offset);
  std::set<std::string> names;
  for (std::uint64_t i = 0; i < end.entry_count; ++i) {
    const std::size_t at = c.position();
    std::uint32_t signature = 0, crc = 0, compressed32 = 0, size32 = 0, external = 0, offset32 = 0;
    std::uint16_t made_by = 0, needed = 0, flags = 0, method = 0, time = 0, date = 0, name_length = 0,
                  extra_length = 0, comment_length = 0, disk = 0, internal = 0;
    if (!(c.read_le(signature) && c.read_le(made_by) && c.read_le(needed) && c.read_le(flags) &&
          c.read_le(method) && c.read_le(time) && c.read_le(date) && c.read_le(crc) &&
          c.read_le(compressed32) && c.read_le(size32) && c.read_le(name_length) &&
          c.read_le(extra_length) && c.read_le(comment_length) && c.read_le(disk) &&
          c.read_le(internal) && c.read_le(external) && c.read_le(offset32))) {
      return fail("central directory entry " + std::to_string(i) + " is truncated");
    }
    if (signature != kCentralSignature) {
      return fail("central directory entry " + std::to_string(i) + " at offset " + std::to_string(at) +
                  " has a bad signature");
    }
    std::string_view name, extra;
    if (!c.read_string(name_length, name) || !c.read_string(extra_length, extra) || !c.skip(comment_length)) {
      return fail("central directory entry " + std::to_string(i) + " runs past the directory");
    }
    ZipEntry entry;
    entry.name = std::string(name);
    if (!valid_entry_name(entry.name)) {
      return fail("entry name '" + entry.name + "' is absolute, empty, or leaves its folder");
    }
    if (!names.insert(entry.name).second) return fail("duplicate entry '" + entry.name + "'");
    if (method != 0) {
      return fail("entry '" + entry.name + "' is compressed (method " + std::to_string(method) +
                  "); torch.save stores entries uncompressed");
    }
    if (flags & 0x1) return fail("entry '" + entry.name + "' is encrypted");
    std::uint64_t compressed = compressed32, size = size32, offset = offset32;
    // The zip64 extra field carries the 64-bit values whose 32-bit fields are 0xffffffff.
    ByteCursor x(std::as_bytes(std::span(extra.data(), extra.size())));
    while (x.remaining() >= 4) {
      std::uint16_t id = 0, length = 0;
      x.read_le(id);
      x.read_le(length);
      std::span<const std::byte> body;
      if (!x.read_bytes(length, body)) return fail("entry '" + entry.name + "': extra field overruns");
      if (id != 0x0001) continue;
      ByteCursor z(body);
      if (size32 == 0xffffffffu && !z.read_le(size)) return fail("entry '" + entry.name + "': short zip64 field");
      if (compressed32 == 0xffffffffu && !z.read_le(compressed)) return fail("entry '" + entry.name + "': short zip64 field");
      if (offset32 == 0xffffffffu && !z.read_le(offset)) return fail("entry '" + entry.name + "': short zip64 field");
    }
    if (compressed != size) {
      return fail("entry '" + entry.name + "': stored entry with compressed size " + std::to_string(compressed) +
                  " != size " + std::to_string(size));
    }
    entry.local_header_offset = offset;
    entry.crc32 = crc;
    if (Status s = read_local_header(entry, size); !s) return s;
    entries.push_back(std::move(entry));
  }
  if (c.position() != end.end_record_offset) {
    return fail("central directory has " + std::to_string(end.end_record_offset - c.position()) +
                " unexplained bytes after its last entry");
  }
  // Entries must not overlap each other or the directory.
  std::vector<const ZipEntry*> order;
  for (const ZipEntry& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(),
            [](const ZipEntry* a, const ZipEntry* b) { return a->local_header_offset < b->local_header_offset; });
  for (std::size_t i = 0; i < order.size(); ++i) {
    const std::uint64_t data_end = order[i]->data_offset + order[i]->data.size();
    const std::uint64_t limit = i + 1 < order.size() ? order[i + 1]->local_header_offset : end.directory_offset;
    if (data_end > limit) {
      return fail("entry '" + order[i]->name + "' (data ends at " + std::to_string(data_end) +
                  ") overlaps " + (i + 1 < order.size() ? "entry '" + order[i + 1]->name + "'" : std::string("the central directory")));
    }
  }
  return {};
}

Status ZipParser::read_local_header(ZipEntry& entry, std::uint64_t size) const {
  if (entry.local_header_offset >= file_.size()) {
    return fail("entry '" + entry.name + "': local header offset " + std::to_string(entry.local_header_offset) +
                " is outside the file (" + std::to_string(file_.size()) + " bytes)");
  }
  ByteCursor c(file_, entry.local_header_offset);
  std::uint32_t signature = 0, crc = 0, compressed = 0, size32 = 0;
  std::uint16_t needed = 0, flags = 0, method = 0, time = 0, date = 0, name_length = 0, extra_length = 0;
  if (!(c.read_le(signature) && c.read_le(needed) && c.read_le(flags) && c.read_le(method) &&
        c.read_le(time) && c.read_le(date) && c.read_le(crc) && c.read_le(compressed) &&
        c.read_le(size32) && c.read_le(name_length) && c.read_le(extra_length))) {
    return fail("entry '" + entry.name + "': local header is truncated");
  }
  if (signature != kLocalSignature) {
    return fail("entry '" + entry.name + "': no local header at offset " + std::to_string(entry.local_header_offset));
  }
  std::string_view local_name;
  if (!c.read_string(name_length, local_name) || local_name != entry.name) {
    return fail("entry '" + entry.name + "': local header names '" + std::string(local_name) + "'");
  }
  if (method != 0) return fail("entry '" + entry.name + "': local header says compressed");
  if (!c.skip(extra_length)) return fail("entry '" + entry.name + "': local extra field runs past the file");
  entry.data_offset = c.position();
  if (size > c.remaining()) {
    return fail("entry '" + entry.name + "': " + std::to_string(size) + " bytes at offset " +
                std::to_string(entry.data_offset) + " run past the end of the file");
  }
  entry.data = file_.subspan(entry.data_offset, size);
  return {};
}

// CRC-32 of a mapped range in chunks, dropping each chunk's pages from the resident set once
// hashed (they stay in the page cache): checking a multi-GiB checkpoint costs bounded memory.
std::uint32_t crc32_releasing(std::span<const std::byte> data) {
  constexpr std::size_t kChunk = 32u << 20;
  std::uint32_t crc = 0;
  for (std::size_t at = 0; at < data.size(); at += kChunk) {
    const std::size_t n = std::min(kChunk, data.size() - at);
    crc = static_cast<std::uint32_t>(libdeflate_crc32(crc, data.data() + at, n));
    if (data.size() > kChunk) release_resident_pages(data.data() + at, data.data() + at + n);
  }
  return crc;
}

}  // namespace

bool ZipArchive::looks_like_zip(std::span<const std::byte> file) noexcept {
  std::uint32_t signature = 0;
  ByteCursor c(file);
  return c.read_le(signature) && signature == kLocalSignature;
}

Result<ZipArchive> ZipArchive::open(std::span<const std::byte> file, const std::string& label,
                                    const ZipOptions& options) {
  ZipParser parser(file, label);
  auto end = parser.find_end();
  if (!end) return std::move(end).error();
  ZipArchive archive;
  if (Status s = parser.read_directory(*end, archive.entries_); !s) return std::move(s).error();
  if (options.check_crc) {
    for (const ZipEntry& e : archive.entries_) {
      // torch writes a zero CRC when CRC computation is turned off, and torch.load accepts it.
      if (e.crc32 == 0 && !e.data.empty()) continue;
      const std::uint32_t crc = crc32_releasing(e.data);
      if (crc != e.crc32) {
        char buffer[96];
        std::snprintf(buffer, sizeof buffer, "CRC-32 is %08x, the directory says %08x", crc, e.crc32);
        return parser.fail("entry '" + e.name + "': " + buffer + " (damaged file; `check_crc=false` skips this)");
      }
    }
  }
  return archive;
}

const ZipEntry* ZipArchive::find(std::string_view name) const noexcept {
  for (const ZipEntry& e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

}  // namespace embedrt::import
