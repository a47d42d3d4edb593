// SSE4.2 build of the kernel (compiled with -msse4.2): 4 floats per vector. There is no F16C at
// this level, so f16 tables decode with integer arithmetic and f16 output converts per element.
#include "kernels/kernel_prelude.hpp"

#include <immintrin.h>

#include <xsimd/xsimd.hpp>

namespace embedrt::kernels::sse42 {

struct Traits {
  using V = xsimd::batch<float, xsimd::sse4_2>;
  static constexpr std::uint64_t kWidth = 4;
  static constexpr bool kCanStream = true;
  // Whether fma is one instruction: Bag::with_combine (bag_body.inl) then takes it for unweighted rows too.
  static constexpr bool kHasFma = false;
  static V load_f32(const std::byte* p) { return V::load_unaligned(reinterpret_cast<const float*>(p)); }
  static __m128i load4_u16(const std::byte* p) {
    return _mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static V load_f16(const std::byte* p) {
    // Exact half -> float: place the exponent and mantissa, rescale by 2^112 (which also turns
    // subnormal halves into normal floats), patch Inf/NaN exponents, restore the sign.
    const __m128i h = load4_u16(p);
    const __m128i shifted = _mm_slli_epi32(_mm_and_si128(h, _mm_set1_epi32(0x7fff)), 13);
    __m128 magnitude = _mm_mul_ps(_mm_castsi128_ps(shifted), _mm_castsi128_ps(_mm_set1_epi32(0x77800000)));
    const __m128i inf_or_nan = _mm_cmpgt_epi32(shifted, _mm_set1_epi32(0x0f7fffff));
    magnitude = _mm_or_ps(magnitude, _mm_castsi128_ps(_mm_and_si128(inf_or_nan, _mm_set1_epi32(0x7f800000))));
    const __m128i sign = _mm_slli_epi32(_mm_and_si128(h, _mm_set1_epi32(0x8000)), 16);
    return V(_mm_or_ps(magnitude, _mm_castsi128_ps(sign)));
  }
  static float f16_one(std::uint16_t h) { return f16_to_f32(h); }  // no F16C
  static V load_bf16(const std::byte* p) { return V(_mm_castsi128_ps(_mm_slli_epi32(load4_u16(p), 16))); }
  static V load_i8(const std::byte* p) {
    std::int32_t four;
    std::memcpy(&four, p, 4);
    return V(_mm_cvtepi32_ps(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(four))));
  }
  // Four 4-bit codes (low nibble first) as floats: from the low nibble of p[0] (two bytes), or,
  // `odd`, from its high nibble (three bytes). Read as one 4-byte load, inside the row as the avx2
  // build's 8-byte one (the row's f16 scale and bias follow its codes).
  static V load_u4(const std::byte* p, bool odd) {
    std::uint32_t bits;
    std::memcpy(&bits, p, 4);
    bits >>= odd ? 4 : 0;
    const __m128i b = _mm_cvtsi32_si128(static_cast<int>(bits));
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i nibbles = _mm_unpacklo_epi8(_mm_and_si128(b, mask), _mm_and_si128(_mm_srli_epi16(b, 4), mask));
    return V(_mm_cvtepi32_ps(_mm_cvtepu8_epi32(nibbles)));
  }
  static void store_f32(std::byte* p, V v, bool stream) {
    if (stream) {
      _mm_stream_ps(reinterpret_cast<float*>(p), v);
    } else {
      v.store_unaligned(reinterpret_cast<float*>(p));
    }
  }
  static void store_f16(std::byte* p, V v, bool stream) {
    alignas(16) float f[4];
    v.store_aligned(f);
    alignas(8) std::uint16_t h[4];
    for (int k = 0; k < 4; ++k) h[k] = f32_to_f16(f[k]);
    std::int64_t bits;
    std::memcpy(&bits, h, 8);
    store8(p, bits, stream);
  }
  // Eight bytes: a streaming 64-bit integer store (movnti) or a plain one.
  static void store8(std::byte* p, std::int64_t bits, bool stream) {
    if (stream) {
      _mm_stream_si64(reinterpret_cast<long long*>(p), bits);
    } else {
      std::memcpy(p, &bits, 8);
    }
  }
  static void store_bf16(std::byte* p, V v, bool stream) {
    const __m128i u = _mm_castps_si128(v);
    const __m128i lsb = _mm_and_si128(_mm_srli_epi32(u, 16), _mm_set1_epi32(1));
    const __m128i rounded = _mm_srli_epi32(_mm_add_epi32(u, _mm_add_epi32(_mm_set1_epi32(0x7fff), lsb)), 16);
    const __m128i nan = _mm_cmpgt_epi32(_mm_and_si128(u, _mm_set1_epi32(0x7fffffff)), _mm_set1_epi32(0x7f800000));
    const __m128i quiet = _mm_or_si128(_mm_srli_epi32(u, 16), _mm_set1_epi32(0x40));
    const __m128i bits = _mm_blendv_epi8(rounded, quiet, nan);
    store8(p, _mm_cvtsi128_si64(_mm_packus_epi32(bits, bits)), stream);
  }
  static float hsum(V v) { return xsimd::hadd(v); }
  // No FMA at this level: each lane through the correctly rounded scalar fmaf, so the result is the
  // same as on every other ISA. MAXPS(x, acc) is x > acc ? x : acc (acc when either is NaN).
  static V fma(V w, V x, V acc) {
    alignas(16) float a[4], b[4], c[4];
    w.store_aligned(a);
    x.store_aligned(b);
    acc.store_aligned(c);
    for (int k = 0; k < 4; ++k) c[k] = __builtin_fmaf(a[k], b[k], c[k]);
    return V::load_aligned(c);
  }
  static V max_keep(V x, V acc) { return V(_mm_max_ps(x, acc)); }
  static void fence() { _mm_sfence(); }
  static void prefetch(const std::byte* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }
};

#include "kernels/kernel_body.inl"

}  // namespace embedrt::kernels::sse42

namespace embedrt::kernels {
const KernelTable& sse42_kernels() { return sse42::kTable; }
}  // namespace embedrt::kernels
