// AVX-512 build of the kernel (the -m flags of isa_table.def's avx512 row), for AVX-512 CPUs
// without the BF16 conversion (Skylake-SP, Cascade Lake, Ice Lake): 16 floats per vector.
#include "kernels/kernel_prelude.hpp"

#include <immintrin.h>

#include <xsimd/xsimd.hpp>

namespace embedrt::kernels::avx512 {

using Avx512Arch = xsimd::avx512bw;

#include "kernels/avx512_traits.inl"

using Traits = Avx512Traits;

#include "kernels/kernel_body.inl"
#include "kernels/prefetch_l2_kernels.inl"

}  // namespace embedrt::kernels::avx512

namespace embedrt::kernels {
const KernelTable& avx512_kernels() { return avx512::kTable; }
}  // namespace embedrt::kernels
