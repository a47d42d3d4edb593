// AVX-512 build of the kernel for CPUs with the BF16 conversion (Cooper Lake, Sapphire Rapids and
// later, Zen 4 and later): avx512's Traits, with a bf16 output vector stored by one VCVTNEPS2BF16
// instead of the integer instructions that round it by hand. Those kept fewer rows' loads in the
// core's window: f32 -> bf16 and bf16 -> bf16 GPT-2 gathers ran 1.23x and 1.14x
// faster with it (embedrt bench, 1 thread, tables past the LLC; see the commit).
#include "kernels/kernel_prelude.hpp"

#include <immintrin.h>

#include <xsimd/xsimd.hpp>

#include "kernels/avx512bf16_arch.hpp"

namespace embedrt::kernels::avx512bf16 {

using Avx512Arch = simd::Avx512Bf16Arch;

#include "kernels/avx512_traits.inl"

struct Traits : Avx512Traits {
  // VCVTNEPS2BF16 rounds to nearest even and quiets a NaN keeping its sign and payload, as
  // f32_to_bf16, but reads a subnormal float as zero: a vector holding one is stored the long way.
  static void store_bf16(std::byte* p, V v, bool stream) {
    constexpr int kSubnormal = 0x20;  // VFPCLASSPS category
    if (__builtin_expect(_mm512_fpclass_ps_mask(v, kSubnormal) != 0, 0)) {
      Avx512Traits::store_bf16(p, v, stream);
      return;
    }
    store32(p, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)), stream);
  }
};

#include "kernels/kernel_body.inl"
#include "kernels/prefetch_l2_kernels.inl"

}  // namespace embedrt::kernels::avx512bf16

namespace embedrt::kernels {
const KernelTable& avx512bf16_kernels() { return avx512bf16::kTable; }
}  // namespace embedrt::kernels
