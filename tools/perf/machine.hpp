// What a benchmark must say about the machine it ran on, and the memory it used: the last-level
// cache it compares its table and output sizes against, transparent huge pages, resident and
// proportional memory (from /proc), and cache-line eviction for cold measurements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "embedrt/cache_info.hpp"

namespace embedrt::perf {

// The library's reader (one source of truth for the Embedder and the benchmarks).
using ::embedrt::CacheInfo;
using ::embedrt::last_level_cache;

// /sys/kernel/mm/transparent_hugepage/enabled's choice ("always", "madvise", "never"), or
// "unavailable".
std::string transparent_hugepage_mode();

struct MemoryUse {
  std::uint64_t rss = 0, pss = 0;      // bytes
  std::uint64_t anon_huge = 0;         // AnonHugePages: anonymous memory backed by 2 MiB pages
  std::uint64_t file_pmd = 0;          // FilePmdMapped: file pages mapped as 2 MiB pages
  bool known = false;
};
// The whole process (/proc/self/smaps_rollup).
MemoryUse process_memory();
// The mappings of this process that overlap [begin, begin + bytes) (/proc/self/smaps).
MemoryUse range_memory(const void* begin, std::size_t bytes);

// Evicts every cache line of [p, p + bytes) from every level of the cache hierarchy (clflush;
// a no-op where the instruction is unknown), then fences.
void evict(const void* p, std::size_t bytes) noexcept;

// Issues a prefetch (to every cache level) for every cache line of [p, p + bytes) and returns
// without waiting: the limit of several cold rows has all their misses in flight at once.
void prefetch(const void* p, std::size_t bytes) noexcept;

}  // namespace embedrt::perf
