// AVX-512 build of the roofline kernels (the -m flags of runtime/kernels/isa_table.def's avx512 row).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>
#include <xsimd/xsimd.hpp>

#include "embedrt/half.hpp"
#include "roofline_kernels.hpp"

#if EMBEDRT_ROOFLINE_PREFETCH_L2
namespace embedrt::perf::avx512_l2 {
#else
namespace embedrt::perf::avx512 {
#endif

using Avx512Arch = xsimd::avx512bw;

#include "roofline_avx512_traits.inl"

#if EMBEDRT_ROOFLINE_PREFETCH_L2
#include "roofline_prefetch_l2.inl"
using Traits = PrefetchIntoL2<Avx512Traits>;
#else
using Traits = Avx512Traits;
#endif

#include "roofline_body.inl"

}  // namespace embedrt::perf::avx512(_l2)

namespace embedrt::perf {
#if EMBEDRT_ROOFLINE_PREFETCH_L2
const RooflineKernels& avx512_l2_roofline() { return avx512_l2::kRoofline; }
#else
const RooflineKernels& avx512_roofline() { return avx512::kRoofline; }
#endif
}  // namespace embedrt::perf
