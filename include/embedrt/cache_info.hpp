// The last-level cache of the machine, as the kernels and the benchmarks must both see it: the
// Embedder chooses streaming stores for outputs larger than half of it, and every benchmark
// states its table and output sizes against it. One reader, so the two never disagree.
#pragma once

#include <cstdint>
#include <string>

namespace embedrt {

struct CacheInfo {
  std::uint64_t bytes = 0;  // size of the last-level cache cpu0 uses
  int level = 0;            // 3 on most servers
  int shared_by_cpus = 0;   // logical CPUs sharing that one cache (a socket or a CCX)
  int instances = 0;        // how many such caches the online CPUs have
  std::string source;       // "sysfs", "sysconf" or "default" (32 MiB)
};

// Read once per process from sysfs (cpu0's highest-level data or unified cache). glibc's
// sysconf(_SC_LEVEL3_CACHE_SIZE) is only the fallback: on a Zen 4 VM it reported 320 MiB where
// sysfs said 32 MiB, which put the Embedder's streaming-store threshold past any real output.
const CacheInfo& last_level_cache() noexcept;

}  // namespace embedrt
