// AVX2 + FMA + F16C build of the roofline kernels (the avx2 row of runtime/kernels/isa_table.def).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>
#include <xsimd/xsimd.hpp>

#include "embedrt/half.hpp"
#include "roofline_kernels.hpp"

#if EMBEDRT_ROOFLINE_PREFETCH_L2
namespace embedrt::perf::avx2_l2 {
#else
namespace embedrt::perf::avx2 {
#endif

#include "kernels/avx2_traits.inl"

#if EMBEDRT_ROOFLINE_PREFETCH_L2
#include "roofline_prefetch_l2.inl"
using Traits = PrefetchIntoL2<Avx2Traits>;
#else
using Traits = Avx2Traits;
#endif

#include "roofline_body.inl"

}  // namespace embedrt::perf::avx2(_l2)

namespace embedrt::perf {
#if EMBEDRT_ROOFLINE_PREFETCH_L2
const RooflineKernels& avx2_l2_roofline() { return avx2_l2::kRoofline; }
#else
const RooflineKernels& avx2_roofline() { return avx2::kRoofline; }
#endif
}  // namespace embedrt::perf
