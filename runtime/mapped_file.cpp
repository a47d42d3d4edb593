#include "embedrt/mapped_file.hpp"

#include "errno_message.hpp"
#include "fault_registry.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

namespace embedrt {
namespace detail {

std::string errno_message(int error_number) {
  char buffer[256];
  // GNU strerror_r returns the message pointer (possibly not the buffer).
  return std::string(strerror_r(error_number, buffer, sizeof buffer));
}

}  // namespace detail

using detail::errno_message;

void release_resident_pages(const std::byte* begin, const std::byte* end) noexcept {
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = (reinterpret_cast<std::uintptr_t>(begin) + page - 1) & ~(page - 1);
  const auto last = reinterpret_cast<std::uintptr_t>(end) & ~(page - 1);
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

std::string_view residency_name(Residency residency) noexcept {
  switch (residency) {
    case Residency::kMmap: return "mmap";
    case Residency::kPopulate: return "populate";
    case Residency::kCopy: return "copy";
  }
  return "?";
}

std::optional<Residency> parse_residency(std::string_view name) noexcept {
  for (Residency r : {Residency::kMmap, Residency::kPopulate, Residency::kCopy}) {
    if (name == residency_name(r)) return r;
  }
  return std::nullopt;
}

namespace {

// Transparent huge pages on x86-64 (and most other 64-bit targets) are 2 MiB: a copy is placed
// and sized in whole huge pages so that every part of it can be backed by one.
constexpr std::size_t kHugePage = std::size_t{2} << 20;

FileStamp stamp_of(const struct stat& st) {
  FileStamp s;
  s.device = static_cast<std::uint64_t>(st.st_dev);
  s.inode = static_cast<std::uint64_t>(st.st_ino);
  s.size = static_cast<std::uint64_t>(st.st_size);
  s.modified_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  s.changed_ns = static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
  return s;
}

void advise_huge_pages(void* addr, std::size_t size) {
#ifdef MADV_HUGEPAGE
  ::madvise(addr, size, MADV_HUGEPAGE);  // a hint: without THP the pages are 4 KiB
#endif
}

// Anonymous read-write memory of `length` bytes (a multiple of kHugePage) starting on a huge-page
// boundary, advised to use huge pages before any of it is touched.
void* map_huge_aligned(std::size_t length) {
  const std::size_t reserved = length + kHugePage;
  void* raw = ::mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return MAP_FAILED;
  const auto begin = reinterpret_cast<std::uintptr_t>(raw);
  const auto aligned = (begin + kHugePage - 1) & ~(std::uintptr_t{kHugePage} - 1);
  if (aligned > begin) ::munmap(raw, aligned - begin);
  if (const std::uintptr_t tail = begin + reserved - (aligned + length); tail > 0) {
    ::munmap(reinterpret_cast<void*>(aligned + length), tail);
  }
  void* addr = reinterpret_cast<void*>(aligned);
  advise_huge_pages(addr, length);
  return addr;
}

// A shared read-only mapping of the file's `size` bytes, every page read and mapped now when
// `populate`. A file's pages sit in the page cache in folios of the size the kernel read or wrote
// them in, and a 2 MiB folio is mapped by one TLB entry (FilePmdMapped in smaps) where the mapping
// is aligned for it (the kernel aligns file mappings so). MADV_HUGEPAGE before the first touch makes
// the kernel read the parts of the file not yet cached in 2 MiB folios, which every process mapping
// the file then shares; parts already cached keep their folios. A table of random rows in 4 KiB
// pages takes a TLB miss per row (see README, Residency). Populating with MADV_POPULATE_READ
// (Linux 5.14) keeps the advice, which MAP_POPULATE would come too early for; where the kernel does
// not know it, the file is mapped again with MAP_POPULATE. As with MAP_POPULATE, a page that
// cannot be read now is not an error of the open: a later touch of it is the fault guard's.
void* map_shared_in_huge_pages(int fd, std::size_t size, bool populate) {
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED) return addr;
  advise_huge_pages(addr, size);
  if (!populate) return addr;
  // The kernel's value, for C libraries older than the advice (glibc < 2.35): a kernel that does
  // not know it says EINVAL.
  constexpr int kPopulateRead = 22;  // MADV_POPULATE_READ
  if (::madvise(addr, size, kPopulateRead) == 0 || errno != EINVAL) return addr;
  ::munmap(addr, size);
  addr = ::mmap(nullptr, size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (addr != MAP_FAILED) advise_huge_pages(addr, size);  // for the pages read later
  return addr;
}

// Reads the whole file into `dest`. The file's identity and times are compared before and after:
// a copy that overlapped a rewrite in place could mix two versions, so it is refused, not kept.
Status copy_file(int fd, const std::string& path, const FileStamp& before, std::byte* dest, std::size_t size) {
  std::size_t done = 0;
  while (done < size) {
    const std::size_t chunk = std::min<std::size_t>(size - done, std::size_t{64} << 20);
    const ssize_t n = ::pread(fd, dest + done, chunk, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      return Error(ErrorCode::kIo, "cannot read '" + path + "' at byte " + std::to_string(done) + ": " +
                                       errno_message(e));
    }
    if (n == 0) break;  // shorter than it was at open: caught below
    done += static_cast<std::size_t>(n);
  }
  struct stat after {};
  if (done != size || ::fstat(fd, &after) != 0 || stamp_of(after) != before) {
    return Error(ErrorCode::kIo, "'" + path + "' changed while it was being copied into memory (" +
                                     std::to_string(done) + " of " + std::to_string(size) +
                                     " bytes read); open it again once it is complete");
  }
  return {};
}

}  // namespace

std::optional<FileStamp> FileStamp::of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return stamp_of(st);
}

Result<MappedFile> MappedFile::map(const std::string& path, const OpenOptions& options) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever; it is
  // refused below as not a regular file. (No effect on regular files.)
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int e = errno;
    return Error(e == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo,
                 "cannot open '" + path + "': " + errno_message(e));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return Error(ErrorCode::kIo, "cannot stat '" + path + "': " + errno_message(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error(ErrorCode::kInvalidArgument, "'" + path + "' is not a regular file");
  }
  const FileStamp stamp = stamp_of(st);
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return Error(ErrorCode::kMalformed, "'" + path + "' is empty");
  }
  void* addr = MAP_FAILED;
  std::size_t length = size;
  int map_errno = 0;
  if (options.residency == Residency::kCopy) {
    if (size > SIZE_MAX - 2 * kHugePage) {
      ::close(fd);
      return Error(ErrorCode::kIo, "cannot copy '" + path + "' into memory: " + std::to_string(size) + " bytes");
    }
    length = (size + kHugePage - 1) / kHugePage * kHugePage;
    addr = map_huge_aligned(length);
    map_errno = errno;
    if (addr != MAP_FAILED) {
      if (Status s = copy_file(fd, path, stamp, static_cast<std::byte*>(addr), size); !s) {
        ::munmap(addr, length);
        ::close(fd);
        return std::move(s).error();
      }
      ::mprotect(addr, length, PROT_READ);  // as read-only as a mapping of the file
    }
  } else {
    addr = map_shared_in_huge_pages(fd, size, options.residency == Residency::kPopulate);
    map_errno = errno;
  }
  ::close(fd);  // a mapping keeps the file alive; a copy no longer needs it
  if (addr == MAP_FAILED) {
    return Error(ErrorCode::kIo, std::string(options.residency == Residency::kCopy ? "cannot allocate memory for '"
                                                                                   : "cannot map '") +
                                     path + "': " + errno_message(map_errno));
  }
  bool locked = false;
  if (options.lock_in_memory) {
    if (::mlock(addr, length) != 0) {
      const int e = errno;
      ::munmap(addr, length);
      return Error(ErrorCode::kIo, "cannot lock '" + path + "' in memory (" +
                                       std::to_string(length) + " bytes): " + errno_message(e) +
                                       " (check RLIMIT_MEMLOCK)");
    }
    locked = true;
  }
  return MappedFile(static_cast<const std::byte*>(addr), size, length, options.residency, locked, stamp);
}

MappedFile::MappedFile(const std::byte* data, std::size_t size, std::size_t length, Residency residency, bool locked,
                       const FileStamp& stamp)
    : data_(data),
      size_(size),
      length_(length),
      residency_(residency),
      locked_(locked),
      stamp_(stamp),
      // A copy cannot fault: nothing to guard.
      fault_slot_(residency == Residency::kCopy ? detail::kNoFaultSlot : detail::register_mapping(data, size)) {}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      length_(std::exchange(other.length_, 0)),
      residency_(other.residency_),
      locked_(std::exchange(other.locked_, false)),
      stamp_(other.stamp_),
      fault_slot_(std::exchange(other.fault_slot_, detail::kNoFaultSlot)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    length_ = std::exchange(other.length_, 0);
    residency_ = other.residency_;
    locked_ = std::exchange(other.locked_, false);
    stamp_ = other.stamp_;
    fault_slot_ = std::exchange(other.fault_slot_, detail::kNoFaultSlot);
  }
  return *this;
}

std::uint64_t MappedFile::faults() const noexcept { return detail::mapping_faults(fault_slot_); }

MappedFile::~MappedFile() { release(); }

void MappedFile::release() noexcept {
  if (data_ == nullptr) return;
  detail::unregister_mapping(fault_slot_);
  fault_slot_ = detail::kNoFaultSlot;
  void* addr = const_cast<std::byte*>(data_);
  if (locked_) ::munlock(addr, length_);
  ::munmap(addr, length_);
  data_ = nullptr;
}

}  // namespace embedrt
