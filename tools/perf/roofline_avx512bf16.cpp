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

namespace embedrt::perf::avx512bf16 {

using Avx512Arch = simd::Avx512Bf16Arch;

#include "roofline_avx512_traits.inl"

struct Traits : Avx512Traits {
  static void store_bf16(std::byte* p, V v, bool stream) {  // the roofline's values are never subnormal
    store256(p, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)), stream);
  }
};

#include "roofline_body.inl"

}  // namespace embedrt::perf::avx512bf16

namespace embedrt::perf {
const RooflineKernels& avx512bf16_roofline() { return avx512bf16::kRoofline; }
}  // namespace embedrt::perf
