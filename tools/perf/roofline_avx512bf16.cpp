// AVX-512 build of the roofline kernels for CPUs with the BF16 conversion (the -m flags of
// runtime/kernels/isa_table.def's avx512bf16 row): a bf16 output is stored as the avx512bf16
// kernels store it, so the roofline is never slower than the gather it bounds.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>
#include <xsimd/xsimd.hpp>

#include "embedrt/half.hpp"
#include "kernels/avx512bf16_arch.hpp"
#include "roofline_kernels.hpp"

#if EMBEDRT_ROOFLINE_PREFETCH_L2
namespace embedrt::perf::avx512bf16_l2 {
#else
namespace embedrt::perf::avx512bf16 {
#endif

using Avx512Arch = simd::Avx512Bf16Arch;

#include "roofline_avx512_traits.inl"

struct Bf16Traits : Avx512Traits {
  static void store_bf16(std::byte* p, V v, bool stream) {  // the roofline's values are never subnormal
    store256(p, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)), stream);
  }
};

#if EMBEDRT_ROOFLINE_PREFETCH_L2
#include "roofline_prefetch_l2.inl"
using Traits = PrefetchIntoL2<Bf16Traits>;
#else
using Traits = Bf16Traits;
#endif

#include "roofline_body.inl"

}  // namespace embedrt::perf::avx512bf16(_l2)

namespace embedrt::perf {
#if EMBEDRT_ROOFLINE_PREFETCH_L2
const RooflineKernels& avx512bf16_l2_roofline() { return avx512bf16_l2::kRoofline; }
#else
const RooflineKernels& avx512bf16_roofline() { return avx512bf16::kRoofline; }
#endif
}  // namespace embedrt::perf
