// AVX2 + FMA + F16C build of the roofline kernels (the avx2 row of runtime/kernels/isa_table.def).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>
#include <xsimd/xsimd.hpp>

#include "embedrt/half.hpp"
#include "roofline_kernels.hpp"

#if EMBEDRT_ROOFLINE_PREFETCH_L2
namespace embedrt::perf::avx2_l2 {
#else
namespace embedrt::perf::avx2 {
#endif

struct Avx2Traits {
  using V = xsimd::batch<float, xsimd::avx2>;
  static constexpr std::uint64_t kWidth = 8;
  static constexpr bool kCanStream = true;
  static __m128i load8_u16(const std::byte* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
  static V load_f32(const std::byte* p) { return V(_mm256_loadu_ps(reinterpret_cast<const float*>(p))); }
  static V load_f16(const std::byte* p) { return V(_mm256_cvtph_ps(load8_u16(p))); }
  static V load_bf16(const std::byte* p) {
    return V(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load8_u16(p)), 16)));
  }
  static V load_i8(const std::byte* p) {
    return V(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))));
  }
  // Lane i holds code i: the 32 bits of codes broadcast to every lane, each lane shifted by 4i.
  static V load_u4(const std::byte* p, bool odd) {
    std::uint64_t bits;  // one 8-byte load, inside the row (as the library's avx2 kernel)
    __builtin_memcpy(&bits, p, 8);
    bits >>= odd ? 4 : 0;
    const __m256i codes = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(bits))),
                                            _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    return V(_mm256_cvtepi32_ps(_mm256_and_si256(codes, _mm256_set1_epi32(15))));
  }
  static void store_f32(std::byte* p, V v, bool stream) {
    if (stream) {
      _mm256_stream_ps(reinterpret_cast<float*>(p), v);
    } else {
      _mm256_storeu_ps(reinterpret_cast<float*>(p), v);
    }
  }
  static void store128(std::byte* p, __m128i bits, bool stream) {
    if (stream) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(p), bits);
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), bits);
    }
  }
  static void store_f16(std::byte* p, V v, bool stream) {
    store128(p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), stream);
  }
  static void store_bf16(std::byte* p, V v, bool stream) {  // round to nearest even, NaN kept quiet
    const __m256i u = _mm256_castps_si256(v);  // as the avx2 kernel
    const __m256i high = _mm256_srli_epi32(u, 16);
    const __m256i odd = _mm256_and_si256(high, _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, odd), _mm256_set1_epi32(0x7fff)), 16);
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
    const __m256i bits = _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(rounded), _mm256_castsi256_ps(quiet), nan));
    store128(p, _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1)), stream);
  }
  static void fence() { _mm_sfence(); }
  static void prefetch(const std::byte* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }
};

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
