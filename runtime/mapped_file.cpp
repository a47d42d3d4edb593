#include "embedrt/mapped_file.hpp"

#include "errno_message.hpp"
#include "fault_registry.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return Error(ErrorCode::kMalformed, "'" + path + "' is empty");
  }
  int flags = MAP_SHARED;
  if (options.populate) flags |= MAP_POPULATE;
  void* addr = ::mmap(nullptr, size, PROT_READ, flags, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (addr == MAP_FAILED) {
    return Error(ErrorCode::kIo, "cannot map '" + path + "': " + errno_message(map_errno));
  }
  // Advice is a hint; failures are not errors (e.g. no THP support).
  if (options.will_need) ::madvise(addr, size, MADV_WILLNEED);
  if (options.random_access) ::madvise(addr, size, MADV_RANDOM);
#ifdef MADV_HUGEPAGE
  if (options.huge_pages) ::madvise(addr, size, MADV_HUGEPAGE);
#endif
  bool locked = false;
  if (options.lock_in_memory) {
    if (::mlock(addr, size) != 0) {
      const int e = errno;
      ::munmap(addr, size);
      return Error(ErrorCode::kIo, "cannot lock '" + path + "' in memory (" +
                                       std::to_string(size) + " bytes): " + errno_message(e) +
                                       " (check RLIMIT_MEMLOCK)");
    }
    locked = true;
  }
  return MappedFile(static_cast<const std::byte*>(addr), size, locked);
}

MappedFile::MappedFile(const std::byte* data, std::size_t size, bool locked)
    : data_(data), size_(size), locked_(locked), fault_slot_(detail::register_mapping(data, size)) {}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      locked_(std::exchange(other.locked_, false)),
      fault_slot_(std::exchange(other.fault_slot_, detail::kNoFaultSlot)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    locked_ = std::exchange(other.locked_, false);
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
  if (locked_) ::munlock(addr, size_);
  ::munmap(addr, size_);
  data_ = nullptr;
}

}  // namespace embedrt
