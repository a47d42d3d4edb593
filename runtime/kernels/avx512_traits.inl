// The AVX-512 Traits (16 floats per vector) of kernel_body.inl, shared by the two AVX-512 units:
// kernel_avx512.cpp uses them as they are, kernel_avx512bf16.cpp with the one-instruction bf16
// store. Included inside each unit's own namespace, after <immintrin.h>, xsimd, and the unit's
// Avx512Arch (xsimd's avx512bw, or a type of the unit's own with its registers).

struct Avx512Traits {
  using V = xsimd::batch<float, Avx512Arch>;
  static constexpr std::uint64_t kWidth = 16;
  static constexpr bool kCanStream = true;
  // Whether fma is one instruction: Bag::with_combine (bag_body.inl) then takes it for unweighted rows too.
  static constexpr bool kHasFma = true;
  static V load_f32(const std::byte* p) { return V::load_unaligned(reinterpret_cast<const float*>(p)); }
  static __m256i load16_u16(const std::byte* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static V load_f16(const std::byte* p) { return V(_mm512_cvtph_ps(load16_u16(p))); }
  static float f16_one(std::uint16_t h) { return _cvtsh_ss(h); }
  static V load_bf16(const std::byte* p) {
    return V(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load16_u16(p)), 16)));
  }
  static V load_i8(const std::byte* p) {
    return V(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))));
  }
  // Sixteen 4-bit codes (low nibble first; from the high nibble of p[0] when `odd`, nine bytes,
  // never past the row's codes) dequantized by lookup: the sixteen values code * scale + bias,
  // by the same multiply and add as the other ISAs (so the same bits), fill one register, and
  // VPERMPS picks each code's value by the low four bits of its dword, so the codes need neither
  // masking nor conversion to float. The loops calling it hoist the table out (one per row);
  // were one not to, the table costs the multiply and add per vector that the arithmetic would.
  // Measured against the arithmetic (bench/ab.py, 1 thread, 5 rounds): GPT-2 int4 + positions
  // -> f32 1.11x, -> bf16 1.10x, a 2 GB int4 table 1.10x, bags of 32 1.21x, int8 control 1.00x.
  static V dequantize_u4(const std::byte* p, bool odd, float scale, float bias) {
    const V codes(_mm512_cvtepi32_ps(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)));
    const V table = codes * V(scale) + V(bias);
    std::uint64_t bits;
    std::memcpy(&bits, p, 8);
    if (odd) bits = (bits >> 4) | (static_cast<std::uint64_t>(p[8]) << 60);
    const __m128i b = _mm_cvtsi64_si128(static_cast<long long>(bits));
    // Byte 2i holds code 2i in its low nibble, byte 2i + 1 code 2i + 1 (the shift brings the next
    // byte's low nibble into the high one; VPERMPS ignores both high nibbles).
    const __m128i nibbles = _mm_unpacklo_epi8(b, _mm_srli_epi16(b, 4));
    return V(_mm512_permutexvar_ps(_mm512_cvtepu8_epi32(nibbles), table));
  }
  static void store_f32(std::byte* p, V v, bool stream) {
    if (stream) {
      _mm512_stream_ps(reinterpret_cast<float*>(p), v);
    } else {
      v.store_unaligned(reinterpret_cast<float*>(p));
    }
  }
  static void store32(std::byte* p, __m256i bits, bool stream) {
    if (stream) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(p), bits);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bits);
    }
  }
  static void store_f16(std::byte* p, V v, bool stream) {
    store32(p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), stream);
  }
  // f32_to_bf16 in eight instructions: round to nearest even by adding 0x7fff plus the kept part's
  // lowest bit, or for a NaN keep its high half with the quiet bit set.
  static void store_bf16(std::byte* p, V v, bool stream) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i high = _mm512_srli_epi32(u, 16);
    const __m512i odd = _mm512_and_si512(high, _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, odd), _mm512_set1_epi32(0x7fff)), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i bits = _mm512_mask_or_epi32(rounded, nan, high, _mm512_set1_epi32(0x40));
    store32(p, _mm512_cvtepi32_epi16(bits), stream);
  }
  static float hsum(V v) { return _mm512_reduce_add_ps(v); }
  // VMAXPS(x, acc) is x > acc ? x : acc (acc when either is NaN), as the reference.
  static V fma(V w, V x, V acc) { return V(_mm512_fmadd_ps(w, x, acc)); }
  static V max_keep(V x, V acc) { return V(_mm512_max_ps(x, acc)); }
  static void fence() { _mm_sfence(); }
  // Into L1 (T0), as FBGEMM's kernels (prefetch_l2_kernels.inl has the other choice). NTA against T0
  // (bench/ab.py, Zen 5, 1 thread, tables 3.9x the LLC, 5 rounds, one output buffer) was within
  // the noise: f16 768 1.02-1.04x, bf16 768 1.00x, f16 768 mean + normalize 0.99x, f16 256 0.99x,
  // tables in the LLC 1.01-1.03x, GPT-2 gathers 1.01-1.03x.
  static void prefetch(const std::byte* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }
};
