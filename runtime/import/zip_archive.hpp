// A strict reader for the zip archives torch.save writes: entries are stored (never compressed),
// so each entry's data is a span of the mapped file and can be used in place.
//
// Everything is checked before use: the end records (zip64 included), every central directory
// entry against its local header, data ranges inside the file, no overlap between entries, no
// duplicate or path-traversing names, and CRC-32 (unless the caller opts out).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "embedrt/error.hpp"

namespace embedrt::import {

struct ZipEntry {
  std::string name;
  std::uint64_t local_header_offset = 0;
  std::uint64_t data_offset = 0;
  std::uint32_t crc32 = 0;
  std::span<const std::byte> data;
};

struct ZipOptions {
  bool check_crc = true;
};

class ZipArchive {
 public:
  // `label` names the archive in messages (usually its path).
  static Result<ZipArchive> open(std::span<const std::byte> file, const std::string& label,
                                 const ZipOptions& options = {});

  const std::vector<ZipEntry>& entries() const noexcept { return entries_; }
  const ZipEntry* find(std::string_view name) const noexcept;

  // True when `file` starts like a zip archive.
  static bool looks_like_zip(std::span<const std::byte> file) noexcept;

 private:
  std::vector<ZipEntry> entries_;
};

}  // namespace embedrt::import
