// AVX2 + FMA + F16C build of the kernel (compiled with -mavx2 -mfma -mf16c): 8 floats per vector.
#include "kernels/kernel_prelude.hpp"

#include <immintrin.h>

#include <xsimd/xsimd.hpp>

namespace embedrt::kernels::avx2 {

#include "kernels/avx2_traits.inl"

using Traits = Avx2Traits;

#include "kernels/kernel_body.inl"
#include "kernels/prefetch_l2_kernels.inl"

}  // namespace embedrt::kernels::avx2

namespace embedrt::kernels {
const KernelTable& avx2_kernels() { return avx2::kTable; }
}  // namespace embedrt::kernels
