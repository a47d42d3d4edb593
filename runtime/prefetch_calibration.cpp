// PrefetchLevel::kAuto's measurement. Whether prefetching rows only as far as L2 pays is a fact
// of the machine, not of the CPU model: on one Zen 5 guest, whose random reads from memory took
// 163 ns, the L2 kernels gathered and pooled 1.1-2.9x as fast (into L1 a core keeps fewer misses
// in flight); on another Zen 5 they ran 0.88-0.90x. So it is measured, with the kernels themselves:
// random 1 KiB rows (f32, dim 256) gathered from a private table several times the LLC, by the
// kernels of each level in interleaved rounds; the medians decide.
//
// So is how far ahead rows of at most 1 KiB are prefetched (KernelArgs::min_rows_ahead): on a
// 480 MiB-L3 Intel Xeon guest, at least 32 rows ahead rather than about 8 KiB of rows (8 rows of
// 1 KiB, 16 of 512 bytes) pooled f32 256 bags 1.21-1.26x and f32 128 bags 1.60-1.65x (bench/ab.py,
// 1 thread, tables 3.9x the LLC; docs/BENCHMARKS.md, "The 480 MiB-L3 Xeon again"), where on a Zen 5 16 rows of
// 1 KiB against 8 had copied 0.95x as fast. Measured after the level, with that level's bag kernel:
// random 1 KiB rows pooled in bags of 32, the two distances in interleaved rounds.
#include "prefetch_calibration.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "embedrt/cache_info.hpp"
#include "errno_message.hpp"

namespace embedrt::detail {
namespace {

constexpr std::uint64_t kDim = 256;  // f32 rows of 1 KiB, the middle of the row sizes measured
constexpr std::uint64_t kRowBytes = kDim * sizeof(float);
constexpr std::uint64_t kPassRows = (16u << 20) / kRowBytes;  // 16 MiB of rows a pass
constexpr std::uint64_t kCallRows = 512;                      // rows a kernel call: a 512 KiB output, reused
constexpr std::uint64_t kBagIds = 32;                         // ids a bag of the distance's measure
constexpr std::uint64_t kBagCallIds = 4096;                   // ids a bag call (128 bags: 128 KiB of output)
constexpr int kRounds = 7;
// The distance's ratio is smaller than the level's (1.13-1.18x where the level's was 1.16-1.24x, on
// the Xeon above, whose LLC holds part of the table), and 7 rounds of it once came out 0.94x:
// more rounds, the same 16 MiB each.
constexpr int kDistanceRounds = 15;
// L2 is taken only when it is clearly faster: on a host where the two tie, L1 is FBGEMM's choice
// and what every other measurement of this project assumed. So is the far distance.
constexpr double kL2Margin = 1.05;
constexpr double kFarMargin = 1.05;

// Four times the LLC, so that most rows come from memory, within [64 MiB, 256 MiB] (a machine
// with a larger LLC measures rows partly from it, where the two levels tie: it keeps L1).
std::uint64_t table_bytes_for(std::uint64_t llc_bytes) {
  return std::clamp<std::uint64_t>(4 * llc_bytes, std::uint64_t{64} << 20, std::uint64_t{256} << 20);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Fresh random rows for a pass (xorshift64), so none is still cached from the last.
void random_rows(std::vector<std::int32_t>& ids, std::uint64_t rows, std::uint64_t& x) {
  for (std::int32_t& id : ids) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    id = static_cast<std::int32_t>(x % rows);
  }
}

// The median rate (GB/s of rows) of each of two ways of reading random rows: `rounds` rounds, each
// timing way 0 then way 1 (interleaved, so that both see the same machine), every pass over fresh
// random rows in `ids`. `pass(way)` reads the rows of `ids` once.
template <typename Pass>
std::array<double, 2> interleaved_medians(int rounds, std::vector<std::int32_t>& ids, std::uint64_t rows,
                                          std::uint64_t& x, Pass pass) {
  std::vector<double> rates[2];
  for (int round = 0; round < rounds; ++round) {
    for (int way = 0; way < 2; ++way) {
      random_rows(ids, rows, x);
      const auto start = std::chrono::steady_clock::now();
      pass(way);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      rates[way].push_back(static_cast<double>(ids.size() * kRowBytes) / seconds / 1e9);
    }
  }
  return {median(std::move(rates[0])), median(std::move(rates[1]))};
}

}  // namespace

PrefetchCalibration measure_prefetch_levels(bool huge_pages, kernels::RangeKernel into_l1, kernels::RangeKernel into_l2,
                                            kernels::BagKernel pool_l1, kernels::BagKernel pool_l2) {
  PrefetchCalibration c;
  c.table_bytes = table_bytes_for(last_level_cache().bytes);
  void* p = ::mmap(nullptr, c.table_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    c.note = "no memory for the calibration's " + std::to_string(c.table_bytes >> 20) + " MiB table (" +
             errno_message(errno) + "): L1 kept";
    return c;
  }
  (void)::madvise(p, c.table_bytes, huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);  // a hint
  // 0x3c3c3c3c is a normal float (0.0115): no denormal slows the kernels' arithmetic.
  std::memset(p, 0x3c, c.table_bytes);

  const std::uint64_t rows = c.table_bytes / kRowBytes;
  std::vector<std::int32_t> ids(kPassRows);
  std::vector<float> out(kCallRows * kDim);
  kernels::KernelArgs a;
  a.token = static_cast<const std::byte*>(p);
  a.token_stride = kRowBytes;
  a.dim = kDim;
  a.row_bytes = kRowBytes;
  a.length = kCallRows;
  a.steps = kCallRows;
  a.out = out.data();
  a.token_rows_from_memory = true;

  std::uint64_t x = 0x9e3779b97f4a7c15u;
  const auto [l1_gbs, l2_gbs] = interleaved_medians(kRounds, ids, rows, x, [&](int level) {
    const kernels::RangeKernel kernel = level == 0 ? into_l1 : into_l2;
    for (std::uint64_t first = 0; first < kPassRows; first += kCallRows) {
      a.ids = {ids.data() + first, false};
      kernel(a, 0, kCallRows);
    }
  });
  c.l1_gbs = l1_gbs;
  c.l2_gbs = l2_gbs;
  c.level = c.l2_gbs >= kL2Margin * c.l1_gbs ? PrefetchLevel::kL2 : PrefetchLevel::kL1;

  kernels::PoolArgs b;
  b.token = a.token;
  b.token_stride = kRowBytes;
  b.dim = kDim;
  b.row_bytes = kRowBytes;
  b.length = kBagIds;
  b.bags = kBagCallIds / kBagIds;
  b.out = out.data();
  b.token_rows_from_memory = true;
  const kernels::BagKernel pool = c.level == PrefetchLevel::kL2 ? pool_l2 : pool_l1;
  const auto [near_gbs, far_gbs] = interleaved_medians(kDistanceRounds, ids, rows, x, [&](int far) {
    b.min_rows_ahead = far ? kernels::kFarRowsAhead : kernels::kNearRowsAhead;
    for (std::uint64_t first = 0; first < kPassRows; first += kBagCallIds) {
      b.ids = {ids.data() + first, false};
      pool(b, 0, b.bags);
    }
  });
  ::munmap(p, c.table_bytes);
  c.near_gbs = near_gbs;
  c.far_gbs = far_gbs;
  c.min_rows_ahead = c.far_gbs >= kFarMargin * c.near_gbs ? kernels::kFarRowsAhead : kernels::kNearRowsAhead;
  return c;
}

const PrefetchCalibration& calibrate_prefetch_level(Isa isa, bool huge_pages, kernels::RangeKernel into_l1,
                                                    kernels::RangeKernel into_l2, kernels::BagKernel pool_l1,
                                                    kernels::BagKernel pool_l2) {
  // Measured under the lock: a second Embedder created meanwhile waits for the answer rather than
  // measuring against the first.
  static std::mutex mutex;
  static std::map<std::pair<Isa, bool>, PrefetchCalibration> measured;  // nodes stay put: references last
  const std::lock_guard lock(mutex);
  const auto key = std::make_pair(isa, huge_pages);
  auto found = measured.find(key);
  if (found == measured.end()) found = measured.emplace(key, measure_prefetch_levels(huge_pages, into_l1, into_l2, pool_l1, pool_l2)).first;
  return found->second;
}

}  // namespace embedrt::detail
