// The xsimd architecture of the avx512bf16 units (runtime/kernels/kernel_avx512bf16.cpp and the
// roofline's): include only from a unit compiled with the -m flags of isa_table.def's avx512bf16 row.
#pragma once

#include <immintrin.h>

#include <xsimd/xsimd.hpp>

// xsimd's avx512bw under a type of these units' own, with registers of their own. The xsimd
// functions a unit instantiates are weak symbols named by their architecture and register types;
// were they avx512bw's in the avx512bf16 units too, a linker keeping one copy could hand the avx512
// units theirs, compiled with -mavx512bf16 (check_kernel_symbols.py finds any such symbol).
namespace embedrt::simd {
struct Avx512Bf16Arch : xsimd::avx512bw {
  static constexpr char const* name() noexcept { return "embedrt_avx512bf16"; }
};
}  // namespace embedrt::simd

namespace xsimd::types {
template <class T>
struct get_bool_simd_register<T, embedrt::simd::Avx512Bf16Arch> {
  using type = simd_avx512_bool_register<T>;
};
#define EMBEDRT_AVX512BF16_REGISTER(scalar, vector) \
  XSIMD_DECLARE_SIMD_REGISTER(scalar, embedrt::simd::Avx512Bf16Arch, vector)
EMBEDRT_AVX512BF16_REGISTER(bool, __m512i);
EMBEDRT_AVX512BF16_REGISTER(signed char, __m512i);
EMBEDRT_AVX512BF16_REGISTER(unsigned char, __m512i);
EMBEDRT_AVX512BF16_REGISTER(char, __m512i);
EMBEDRT_AVX512BF16_REGISTER(short, __m512i);
EMBEDRT_AVX512BF16_REGISTER(unsigned short, __m512i);
EMBEDRT_AVX512BF16_REGISTER(int, __m512i);
EMBEDRT_AVX512BF16_REGISTER(unsigned int, __m512i);
EMBEDRT_AVX512BF16_REGISTER(long, __m512i);
EMBEDRT_AVX512BF16_REGISTER(unsigned long, __m512i);
EMBEDRT_AVX512BF16_REGISTER(long long, __m512i);
EMBEDRT_AVX512BF16_REGISTER(unsigned long long, __m512i);
EMBEDRT_AVX512BF16_REGISTER(float, __m512);
EMBEDRT_AVX512BF16_REGISTER(double, __m512d);
#undef EMBEDRT_AVX512BF16_REGISTER
}  // namespace xsimd::types
