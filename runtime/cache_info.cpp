#include "embedrt/cache_info.hpp"

#include "first_line.hpp"

#include <unistd.h>

#include <charconv>
#include <set>
#include <string_view>

namespace embedrt {
namespace {

// The leading decimal number of `text` (0 when there is none); `rest` gets what follows it.
std::uint64_t leading_number(std::string_view text, std::string_view* rest = nullptr) {
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (rest != nullptr) *rest = text.substr(static_cast<std::size_t>(end - text.data()));
  return ec == std::errc() ? value : 0;
}

// "32768K" -> bytes.
std::uint64_t parse_size(std::string_view text) {
  std::string_view unit;
  std::uint64_t value = leading_number(text, &unit);
  if (!unit.empty() && (unit[0] == 'K' || unit[0] == 'k')) value <<= 10;
  if (!unit.empty() && (unit[0] == 'M' || unit[0] == 'm')) value <<= 20;
  if (!unit.empty() && (unit[0] == 'G' || unit[0] == 'g')) value <<= 30;
  return value;
}

// "0-3,8" -> 5.
int count_cpus(std::string_view list) {
  int count = 0;
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    const std::size_t dash = item.find('-');
    if (item.empty()) continue;
    if (dash == std::string_view::npos) {
      ++count;
    } else {
      const std::uint64_t first = leading_number(item.substr(0, dash)), last = leading_number(item.substr(dash + 1));
      if (last >= first) count += static_cast<int>(last - first + 1);
    }
  }
  return count;
}

std::string cache_dir(long cpu, int index) {
  return "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cache/index" + std::to_string(index) + "/";
}

CacheInfo detect() {
  CacheInfo info;
  for (int index = 0; index < 16; ++index) {
    const std::string dir = cache_dir(0, index);
    const std::string level = detail::first_line(dir + "level");
    if (level.empty()) break;
    if (detail::first_line(dir + "type") == "Instruction") continue;
    const int l = static_cast<int>(leading_number(level));
    const std::uint64_t bytes = parse_size(detail::first_line(dir + "size"));
    if (l >= info.level && bytes > 0) {
      info.level = l;
      info.bytes = bytes;
      info.shared_by_cpus = count_cpus(detail::first_line(dir + "shared_cpu_list"));
    }
  }
  if (info.bytes > 0) {
    info.source = "sysfs";
    // Distinct caches of that level over the online CPUs.
    std::set<std::string> distinct;
    const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
    for (long cpu = 0; cpu < cpus; ++cpu) {
      for (int index = 0; index < 16; ++index) {
        const std::string dir = cache_dir(cpu, index);
        const std::string level = detail::first_line(dir + "level");
        if (level.empty()) break;
        if (static_cast<int>(leading_number(level)) == info.level && detail::first_line(dir + "type") != "Instruction") {
          distinct.insert(detail::first_line(dir + "shared_cpu_list"));
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

}  // namespace

const CacheInfo& last_level_cache() noexcept {
  static const CacheInfo info = [] {
    try {
      return detect();
    } catch (...) {  // std::bad_alloc from a path string: the default, never an abort
      return CacheInfo{std::uint64_t{32} << 20, 0, 0, 0, "default"};
    }
  }();
  return info;
}

}  // namespace embedrt
