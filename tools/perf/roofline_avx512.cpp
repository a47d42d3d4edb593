// AVX-512 build of the roofline kernels (the -m flags of runtime/kernels/isa_table.def's avx512 row).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>
#include <xsimd/xsimd.hpp>

#include "embedrt/half.hpp"
#include "roofline_kernels.hpp"

namespace embedrt::perf::avx512 {

using Avx512Arch = xsimd::avx512bw;

#include "roofline_avx512_traits.inl"

using Traits = Avx512Traits;

#include "roofline_body.inl"

}  // namespace embedrt::perf::avx512

namespace embedrt::perf {
const RooflineKernels& avx512_roofline() { return avx512::kRoofline; }
}  // namespace embedrt::perf
