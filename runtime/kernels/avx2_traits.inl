// The AVX2 + FMA + F16C Traits (8 floats per vector) of kernel_body.inl, shared by the kernel
// (kernel_avx2.cpp) and the roofline that bounds it (tools/perf/roofline_avx2.cpp), so the two
// load and store a row by the same instructions. Included inside each unit's own namespace, after
// <immintrin.h>, <cstring> and xsimd.

struct Avx2Traits {
  using V = xsimd::batch<float, xsimd::avx2>;
  static constexpr std::uint64_t kWidth = 8;
  static constexpr bool kCanStream = true;
  // Whether fma is one instruction: Bag::with_combine (bag_body.inl) then takes it for unweighted rows too.
  static constexpr bool kHasFma = true;
  static V load_f32(const std::byte* p) { return V::load_unaligned(reinterpret_cast<const float*>(p)); }
  static __m128i load8_u16(const std::byte* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
  static V load_f16(const std::byte* p) { return V(_mm256_cvtph_ps(load8_u16(p))); }
  static float f16_one(std::uint16_t h) { return _cvtsh_ss(h); }
  static V load_bf16(const std::byte* p) {
    return V(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load8_u16(p)), 16)));
  }
  static V load_i8(const std::byte* p) {
    return V(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))));
  }
  // Eight 4-bit codes (low nibble first) as floats: from the low nibble of p[0] (four bytes), or,
  // `odd`, from its high nibble (five bytes). Read as one 8-byte load, which stays inside the row:
  // a vector's codes end at least 4 bytes before the row's end, its f16 scale and bias (FORMAT.md
  // 4.2). A 4- or 5-byte copy into a zeroed word cost 2.2x in the int4 roofline (see the commit).
  // The 32 bits of codes are broadcast to every lane and lane i shifted right by 4i: 3 vector
  // instructions before the conversion, where splitting and interleaving the nibbles took 6.
  static V load_u4(const std::byte* p, bool odd) {
    std::uint64_t bits;
    std::memcpy(&bits, p, 8);
    bits >>= odd ? 4 : 0;
    const __m256i codes = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(bits))),
                                            _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    return V(_mm256_cvtepi32_ps(_mm256_and_si256(codes, _mm256_set1_epi32(15))));
  }
  static void store_f32(std::byte* p, V v, bool stream) {
    if (stream) {
      _mm256_stream_ps(reinterpret_cast<float*>(p), v);
    } else {
      v.store_unaligned(reinterpret_cast<float*>(p));
    }
  }
  static void store16(std::byte* p, __m128i bits, bool stream) {
    if (stream) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(p), bits);
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), bits);
    }
  }
  static void store_f16(std::byte* p, V v, bool stream) {
    store16(p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), stream);
  }
  // f32_to_bf16: round to nearest even by adding 0x7fff plus the kept part's lowest bit, or for a
  // NaN keep its high half with the quiet bit set.
  static void store_bf16(std::byte* p, V v, bool stream) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i high = _mm256_srli_epi32(u, 16);
    const __m256i odd = _mm256_and_si256(high, _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, odd), _mm256_set1_epi32(0x7fff)), 16);
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
    const __m256i bits = _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(rounded), _mm256_castsi256_ps(quiet), nan));
    store16(p, _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1)), stream);
  }
  static float hsum(V v) { return xsimd::hadd(v); }
  // VMAXPS(x, acc) is x > acc ? x : acc (acc when either is NaN), as the reference.
  static V fma(V w, V x, V acc) { return V(_mm256_fmadd_ps(w, x, acc)); }
  static V max_keep(V x, V acc) { return V(_mm256_max_ps(x, acc)); }
  static void fence() { _mm_sfence(); }
  static void prefetch(const std::byte* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }
};
