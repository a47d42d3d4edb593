#include "machine.hpp"

#include "first_line.hpp"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace embedrt::perf {
namespace {

void add_smaps_field(MemoryUse& use, const std::string& line) {
  std::istringstream fields(line);
  std::string key;
  std::uint64_t kib = 0;
  fields >> key >> kib;
  if (key == "Rss:") use.rss += kib << 10;
  if (key == "Pss:") use.pss += kib << 10;
  if (key == "AnonHugePages:") use.anon_huge += kib << 10;
  if (key == "FilePmdMapped:") use.file_pmd += kib << 10;
}

}  // namespace


std::string transparent_hugepage_mode() {
  const std::string line = detail::first_line("/sys/kernel/mm/transparent_hugepage/enabled");
  const auto open = line.find('['), close = line.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return "unavailable";
  return line.substr(open + 1, close - open - 1);
}

MemoryUse process_memory() {
  MemoryUse use;
  std::ifstream in("/proc/self/smaps_rollup");
  std::string line;
  while (std::getline(in, line)) {
    use.known = true;
    add_smaps_field(use, line);
  }
  return use;
}

MemoryUse range_memory(const void* begin, std::size_t bytes) {
  MemoryUse use;
  const auto lo = reinterpret_cast<std::uintptr_t>(begin), hi = lo + bytes;
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    // A mapping's header: "start-end perms offset dev inode path"; its fields follow.
    const auto dash = line.find('-');
    const auto space = line.find(' ');
    if (dash != std::string::npos && space != std::string::npos && dash < space &&
        line.find_first_not_of("0123456789abcdef") == dash) {
      const std::uintptr_t start = std::stoull(line.substr(0, dash), nullptr, 16);
      const std::uintptr_t end = std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16);
      inside = start < hi && end > lo;
      use.known = use.known || inside;
      continue;
    }
    if (inside) add_smaps_field(use, line);
  }
  return use;
}

void evict(const void* p, std::size_t bytes) noexcept {
#if defined(__x86_64__) || defined(__i386__)
  const auto* b = static_cast<const char*>(p);
  const auto first = reinterpret_cast<std::uintptr_t>(b) & ~std::uintptr_t{63};
  for (std::uintptr_t line = first; line < reinterpret_cast<std::uintptr_t>(b) + bytes; line += 64) {
    _mm_clflush(reinterpret_cast<const void*>(line));
  }
  _mm_mfence();
#else
  (void)p;
  (void)bytes;
#endif
}

void prefetch(const void* p, std::size_t bytes) noexcept {
  const auto* b = static_cast<const char*>(p);
  const auto first = reinterpret_cast<std::uintptr_t>(b) & ~std::uintptr_t{63};
  for (std::uintptr_t line = first; line < reinterpret_cast<std::uintptr_t>(b) + bytes; line += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 3);
  }
}

}  // namespace embedrt::perf
