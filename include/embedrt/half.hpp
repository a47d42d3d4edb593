// Scalar conversions between float and the 16-bit types (bfloat16 and IEEE half as raw bits).
// Used by the reference path, the converter and the tails of vector kernels, so they must be
// exact: round to nearest even, NaN stays NaN (quiet), infinities and signed zeros are kept,
// subnormals are handled. `static`, and __builtin_bit_cast rather than std::bit_cast (a template
// the compiler may emit as a shared symbol): every translation unit, including the per-ISA kernel
// units built with wider instruction sets, keeps a private copy, so the linker can never hand a
// baseline caller a copy compiled for AVX-512.
#pragma once

#include <cstdint>

namespace embedrt {

static inline float bf16_to_f32(std::uint16_t h) noexcept {
  return __builtin_bit_cast(float, static_cast<std::uint32_t>(h) << 16);
}

static inline std::uint16_t f32_to_bf16(float f) noexcept {
  std::uint32_t u = __builtin_bit_cast(std::uint32_t, f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep the sign, force a quiet payload bit
    return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  }
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even; overflow goes to Inf
  return static_cast<std::uint16_t>(u >> 16);
}

static inline float f16_to_f32(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  std::uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // Inf or NaN (payload kept)
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal: shift the leading one into the implicit position.
    std::uint32_t e = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return __builtin_bit_cast(float, bits);
}

static inline std::uint16_t f32_to_f16(float f) noexcept {
  const std::uint32_t u = __builtin_bit_cast(std::uint32_t, f);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: quiet, keep the top payload bits
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  if (abs >= 0x477ff000u) {  // rounds to >= 65520: overflow to infinity
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  }
  if (abs < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    // Add 0.5 (as a float) so the FPU aligns and rounds the mantissa to nearest even.
    const float shifted = __builtin_bit_cast(float, abs) + 0.5f;
    return static_cast<std::uint16_t>(sign | (__builtin_bit_cast(std::uint32_t, shifted) - 0x3f000000u));
  }
  std::uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // nearest, ties to even
  rounded -= 0x38000000u;  // rebias exponent 127 -> 15
  return static_cast<std::uint16_t>(sign | (rounded >> 13));
}

}  // namespace embedrt
