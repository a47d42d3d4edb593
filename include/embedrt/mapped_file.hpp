// The bytes of a whole file, read-only, held as OpenOptions::residency says: a shared mapping
// (PROT_READ, MAP_SHARED; every process that maps the same file shares its pages through the page
// cache), populated at open or not, or a private copy in anonymous memory aligned for huge pages.
// Used by TableFile and by the importer (embedrt/import.hpp) to read checkpoints in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "embedrt/error.hpp"
#include "embedrt/table_file.hpp"

namespace embedrt {

class MappedFile {
 public:
  static Result<MappedFile> map(const std::string& path, const OpenOptions& options);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  Residency residency() const noexcept { return residency_; }
  const FileStamp& stamp() const noexcept { return stamp_; }  // from the descriptor that was mapped

  // Pages lost because the file was truncated under the mapping and replaced by zeros: nonzero
  // means the bytes can no longer be trusted. Only counted once install_fault_guard() ran
  // (embedrt/fault_guard.hpp); without it such a read kills the process with SIGBUS. Always 0
  // for a copy, which no change to the file can reach.
  std::uint64_t faults() const noexcept;

 private:
  MappedFile(const std::byte* data, std::size_t size, std::size_t length, Residency residency, bool locked,
             const FileStamp& stamp);
  void release() noexcept;

  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;    // the file's bytes
  std::size_t length_ = 0;  // the mapping's (a copy is rounded up to whole huge pages)
  Residency residency_ = Residency::kMmap;
  bool locked_ = false;
  FileStamp stamp_;
  int fault_slot_ = -1;  // in the fault guard's registry (runtime/fault_registry.hpp)
};

// Drops the whole pages inside [begin, end) from this process's resident set. For file-backed
// shared mappings the data stays in the page cache (dirty pages are written back as usual), so
// streaming over a file of any size this way costs bounded memory. A hint: failures are ignored.
void release_resident_pages(const std::byte* begin, const std::byte* end) noexcept;

}  // namespace embedrt
