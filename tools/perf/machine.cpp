#include "machine.hpp"

#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace embedrt::perf {
namespace {

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// "32768K" -> bytes.
std::uint64_t parse_size(const std::string& text) {
  std::uint64_t value = 0;
  std::size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') value = value * 10 + static_cast<std::uint64_t>(text[i++] - '0');
  if (i < text.size() && (text[i] == 'K' || text[i] == 'k')) value <<= 10;
  if (i < text.size() && (text[i] == 'M' || text[i] == 'm')) value <<= 20;
  return value;
}

// "0-3,8" -> 5.
int count_cpus(const std::string& list) {
  int count = 0;
  std::stringstream items(list);
  std::string item;
  while (std::getline(items, item, ',')) {
    const auto dash = item.find('-');
    if (item.empty()) continue;
    if (dash == std::string::npos) {
      ++count;
    } else {
      count += std::stoi(item.substr(dash + 1)) - std::stoi(item.substr(0, dash)) + 1;
    }
  }
  return count;
}

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

CacheInfo last_level_cache() {
  CacheInfo info;
  const std::string base = "/sys/devices/system/cpu/cpu0/cache/";
  std::string shared_list;
  for (int index = 0; index < 16; ++index) {
    const std::string dir = base + "index" + std::to_string(index) + "/";
    const std::string level = read_line(dir + "level");
    if (level.empty()) break;
    const std::string type = read_line(dir + "type");
    if (type == "Instruction") continue;
    const int l = std::stoi(level);
    if (l >= info.level) {
      info.level = l;
      info.bytes = parse_size(read_line(dir + "size"));
      shared_list = read_line(dir + "shared_cpu_list");
      info.shared_by_cpus = count_cpus(shared_list);
    }
  }
  if (info.bytes > 0) {
    info.source = "sysfs";
    // Distinct caches of that level over the online CPUs.
    std::set<std::string> distinct;
    const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
    for (long cpu = 0; cpu < cpus; ++cpu) {
      for (int index = 0; index < 16; ++index) {
        const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cache/index" + std::to_string(index) + "/";
        const std::string level = read_line(dir + "level");
        if (level.empty()) break;
        if (std::stoi(level) == info.level && read_line(dir + "type") != "Instruction") {
          distinct.insert(read_line(dir + "shared_cpu_list"));
        }
      }
    }
    info.instances = static_cast<int>(distinct.size());
    return info;
  }
  const long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) return {static_cast<std::uint64_t>(l3), 3, 0, 0, "sysconf"};
  return {std::uint64_t{32} << 20, 0, 0, 0, "default"};
}

std::string transparent_hugepage_mode() {
  const std::string line = read_line("/sys/kernel/mm/transparent_hugepage/enabled");
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
