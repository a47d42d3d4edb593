// Included by the AVX2 and AVX-512 kernel units inside their namespace, after kernel_body.inl:
// the same kernels again with every software prefetch going only as far as L2 (T1) instead of
// into L1 (T0), for PrefetchLevel::kL2; and two choices of plan that go with a host whose random
// reads are slow (kPrefetchesIntoL2 in kernel_body.inl: AVX-512 f16/bf16 bags of 13-16 vectors in
// block passes, bag_body.inl; the AVX-512 gather's int8 rows of 6-16 lines staged). A second
// set rather than a choice per call: a runtime flag tested at each prefetch cost bags of rows in
// the cache 2-6% (bench/ab.py, 9-15 rounds).
// The builds that do not want them (EMBEDRT_PREFETCH_L2_KERNELS=OFF: tools/test.sh's sanitizer
// builds, where they double the units' compile time and differ from the L1 set by one
// instruction and those plans, whose block passes the L1 set runs for rows of 17-24 vectors and
// whose stage it runs for int4 rows) hand out the L1 set instead.
//
// T1 against T0 for every prefetch (bench/ab.py, 1 thread, cpu clock, tables 3.9x the LLC,
// 5 rounds, one output buffer) depends on the machine:
//  - a Zen 5 KVM guest with slow random reads (sequential 24 GB/s, a miss 163 ns; a core keeps
//    about 23 lines in flight into L1, ~140 M lines/s): AVX-512 int8 768 bags of 8 / 32 1.67x /
//    1.50x, f16 768 bags of 32 1.48x, f32 768 bags of 8 1.06x, f16 256 1.07x, int8 256 2.54x, f16
//    64 2.91x, GPT-2 f32 gather 1.35x; 2 threads (wall clock, 3 rounds): Llama-3 bf16 gather
//    1.53x, GPT-2 f32 / int8 1.21x / 1.27x. AVX2 (forced): int8 768 bags of 8 / 32 1.78x / 1.69x,
//    f16 768 1.10x, f32 768 1.03x, f16 256 1.34x, int8 256 1.72x, f16 64 2.77x, GPT-2 f32 1.32x.
//    But an f16 128 gather whose rows stay in the LLC ran 0.89x: the Embedder takes this set only
//    for tables larger than half the LLC.
//  - the first Zen 5 host (AVX-512): f16 256 and int8 256 bags of 32 0.88x and 0.90x, int8 768
//    0.96x, f16 768 bags of 8 / 32 / 128 0.96x / 1.03x / 0.95x.

#if EMBEDRT_PREFETCH_L2_KERNELS

template <typename Base>
struct PrefetchIntoL2 : Base {
  static constexpr bool kIntoL2 = true;  // kPrefetchesIntoL2 (kernel_body.inl)
  static void prefetch(const std::byte* p) { __builtin_prefetch(p, 0, 2); }  // prefetcht1
};

using L1Traits = Traits;

namespace l2 {
using Traits = PrefetchIntoL2<L1Traits>;
#include "kernels/kernel_body.inl"
}  // namespace l2

const KernelTable& prefetch_l2_kernels() { return l2::kTable; }

#else

const KernelTable& prefetch_l2_kernels() { return kTable; }

#endif
