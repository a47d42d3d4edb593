// The AVX-512 Traits of roofline_body.inl, shared by roofline_avx512.cpp and
// roofline_avx512bf16.cpp (which stores bf16 as the avx512bf16 kernels do). Included inside each
// unit's own namespace, after <immintrin.h>, xsimd and the unit's Avx512Arch.

struct Avx512Traits {
  using V = xsimd::batch<float, Avx512Arch>;
  static constexpr std::uint64_t kWidth = 16;
  static constexpr bool kCanStream = true;
  static __m256i load16_u16(const std::byte* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static V load_f32(const std::byte* p) { return V(_mm512_loadu_ps(p)); }
  static V load_f16(const std::byte* p) { return V(_mm512_cvtph_ps(load16_u16(p))); }
  static V load_bf16(const std::byte* p) {
    return V(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load16_u16(p)), 16)));
  }
  static V load_i8(const std::byte* p) {
    return V(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))));
  }
  // load_u4(p, odd) * scale + bias in fewer instructions, as the library's AVX-512 kernels
  // dequantize 4-bit codes: VPERMPS looks each code up in the register of the 16 values
  // code * scale + bias (its loop builds it once per row), reading only the low 4 bits of each
  // dword, so the codes need neither the mask nor the conversion.
  static V dequantize_u4(const std::byte* p, bool odd, V scale, V bias) {
    const V values = V(_mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)) * scale + bias;
    std::uint64_t bits;
    __builtin_memcpy(&bits, p, 8);
    if (odd) bits = bits >> 4 | static_cast<std::uint64_t>(static_cast<unsigned>(p[8]) & 15u) << 60;
    const __m512i halves = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(static_cast<int>(bits & 0xffffffffu))),
                                              _mm256_set1_epi32(static_cast<int>(bits >> 32)), 1);
    const __m512i codes = _mm512_srlv_epi32(halves, _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28));
    return V(_mm512_permutexvar_ps(codes, values));
  }
  static void store_f32(std::byte* p, V v, bool stream) {
    if (stream) {
      _mm512_stream_ps(reinterpret_cast<float*>(p), v);
    } else {
      _mm512_storeu_ps(p, v);
    }
  }
  static void store256(std::byte* p, __m256i bits, bool stream) {
    if (stream) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(p), bits);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bits);
    }
  }
  static void store_f16(std::byte* p, V v, bool stream) {
    store256(p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), stream);
  }
  static void store_bf16(std::byte* p, V v, bool stream) {  // as the avx512 kernel
    const __m512i u = _mm512_castps_si512(v);
    const __m512i high = _mm512_srli_epi32(u, 16);
    const __m512i odd = _mm512_and_si512(high, _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, odd), _mm512_set1_epi32(0x7fff)), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    store256(p, _mm512_cvtepi32_epi16(_mm512_mask_or_epi32(rounded, nan, high, _mm512_set1_epi32(0x40))), stream);
  }
  static void fence() { _mm_sfence(); }
  static void prefetch(const std::byte* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }
};
