// A read-only, shared memory mapping of a whole file (PROT_READ, MAP_SHARED): every process
// that maps the same file shares its pages through the page cache. Used by TableFile and by the
// importer (embedrt/import.hpp) to read checkpoints in place.
#pragma once

#include <cstddef>
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

 private:
  MappedFile(const std::byte* data, std::size_t size, bool locked)
      : data_(data), size_(size), locked_(locked) {}
  void release() noexcept;

  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool locked_ = false;
};

// Drops the whole pages inside [begin, end) from this process's resident set. For file-backed
// shared mappings the data stays in the page cache (dirty pages are written back as usual), so
// streaming over a file of any size this way costs bounded memory. A hint: failures are ignored.
void release_resident_pages(const std::byte* begin, const std::byte* end) noexcept;

}  // namespace embedrt
