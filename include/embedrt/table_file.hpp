// Read-only, memory-mapped access to an .embt file.
//
// Opening maps the file and validates its header, directory and metadata with overflow-checked
// arithmetic; with the default residency it never touches table data, so it costs O(1) in the
// size of the tables (Residency::kPopulate and kCopy read every byte once, by design). Checking
// the data checksums is the separate verify() call.
//
// Thread safety: a TableFile is immutable after open(). Copies share one mapping, which lives as
// long as any copy or any Model built from it; any number of threads may read concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "embedrt/error.hpp"
#include "embedrt/format.hpp"

namespace embedrt {

// How an opened file's bytes are held in memory, chosen at open. README.md ("Residency") has the
// measurements behind each trade-off.
enum class Residency : std::uint8_t {
  // A shared read-only mapping, faulted in lazily: O(1) open; every process mapping the file
  // shares one copy through the page cache. Advised for huge pages: where the kernel keeps a file's
  // page cache in large folios (README, Residency), the parts read through this mapping are
  // read in 2 MiB folios and mapped by one TLB entry each; parts already cached keep the folios
  // they have (often 4 KiB).
  kMmap,
  // The same shared mapping with every page read and mapped at open (MADV_POPULATE_READ after the
  // huge-page advice; MAP_POPULATE on kernels before 5.14): open costs a pass over the file, and no
  // request pays a page fault afterwards. Still shared.
  kPopulate,
  // A private copy in anonymous memory aligned for 2 MiB transparent huge pages (MADV_HUGEPAGE):
  // fewer TLB misses on random rows of a large table, and immune to the file being truncated or
  // rewritten while open. Costs a copy at open and the table's size in every process.
  kCopy,
};

std::string_view residency_name(Residency residency) noexcept;  // "mmap", "populate", "copy"
std::optional<Residency> parse_residency(std::string_view name) noexcept;

struct OpenOptions {
  Residency residency = Residency::kMmap;
  bool lock_in_memory = false;  // mlock the bytes (any residency); open fails if the OS refuses
};

// Which file, in which state: device and inode, size, modification and status-change times.
// TableFile::stamp() is taken from the descriptor that was mapped (or copied), so it names those
// bytes even when the path was replaced just before or after the open; a stat of the path taken
// separately could name another file. Compared with FileStamp::of(path) later: another inode
// means the path was replaced (a mapping keeps the old file, intact); the same inode with another
// size or times means the file was rewritten in place under the mapping.
struct FileStamp {
  std::uint64_t device = 0, inode = 0, size = 0;
  std::int64_t modified_ns = 0, changed_ns = 0;

  static std::optional<FileStamp> of(const std::string& path);  // nullopt: gone or unreadable
  bool same_file(const FileStamp& other) const noexcept { return device == other.device && inode == other.inode; }
  bool operator==(const FileStamp&) const = default;
};

// One table, as described by its directory entry, with a view of its mapped bytes.
struct TableView {
  std::string name;
  Role role = Role::kOther;
  DType dtype = DType::kF32;
  std::uint64_t rows = 0;
  std::uint64_t dim = 0;
  std::uint64_t row_stride = 0;  // bytes
  std::uint64_t offset = 0;      // absolute, in the file
  std::uint64_t checksum = 0;
  std::span<const std::byte> bytes;  // rows * row_stride bytes, 4096-byte aligned

  const std::byte* row(std::uint64_t r) const noexcept { return bytes.data() + r * row_stride; }
};

class TableFile {
 public:
  static Result<TableFile> open(const std::string& path, const OpenOptions& options = {});

  const std::string& path() const noexcept;
  std::uint64_t file_size() const noexcept;
  std::uint16_t version_major() const noexcept;
  std::uint16_t version_minor() const noexcept;
  const Metadata& metadata() const noexcept;
  // How the bytes are held (OpenOptions::residency).
  Residency residency() const noexcept;
  // The file that was opened, as it was then (see FileStamp).
  const FileStamp& stamp() const noexcept;
  std::span<const TableView> tables() const noexcept;

  // The table with this name or role; nullptr when there is none.
  const TableView* find(std::string_view name) const noexcept;
  const TableView* find(Role role) const noexcept;

  // Recomputes the checksum of every table; the error names the first table that differs.
  // Also fails when the file was truncated under the mapping (see lost_pages()).
  Status verify() const;
  // Pages of the mapping lost to a truncation of the file (embedrt/fault_guard.hpp): nonzero
  // means the mapped bytes can no longer be trusted and the file must be reopened.
  std::uint64_t lost_pages() const noexcept;
  // The error to report when lost_pages() != 0.
  Error damaged_error() const;
  Status verify_table(const TableView& table) const;

 private:
  Status verify_contents() const;
  struct Impl;
  explicit TableFile(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace embedrt
