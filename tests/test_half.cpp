// The scalar half-precision conversions, checked against the CPU's own F16C instructions
// (an independent implementation) and against first-principles rounding for bf16.
#include <doctest/doctest.h>
#include <cpuid.h>
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "embedrt/half.hpp"

using namespace embedrt;

namespace {

// F16C (CPUID.1:ECX bit 29), usable once the OS saves the YMM state (XGETBV): its instructions are
// VEX-encoded. Read here, since clang 14's __builtin_cpu_supports does not know "f16c".
bool cpu_has_f16c() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  const bool osxsave = (ecx >> 27) & 1, f16c = (ecx >> 29) & 1;
  if (!osxsave || !f16c) return false;
  unsigned xcr0_low, xcr0_high;
  __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  return (xcr0_low & 0x6) == 0x6;
}

__attribute__((target("f16c"))) std::uint16_t hw_f32_to_f16(float f) {
  return static_cast<std::uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float hw_f16_to_f32(std::uint16_t h) { return _cvtsh_ss(h); }

// bf16 rounding from first principles: the two neighbours, the closer wins, ties go to even.
std::uint16_t bf16_by_definition(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t down = static_cast<std::uint16_t>(u >> 16);
  const std::uint16_t up = static_cast<std::uint16_t>(down + 1);
  const double x = std::fabs(static_cast<double>(f));
  const double lo = std::fabs(static_cast<double>(bf16_to_f32(down)));
  const double hi_value = static_cast<double>(bf16_to_f32(up));
  const double hi = std::isinf(hi_value) ? std::ldexp(1.0, 128) : std::fabs(hi_value);
  if (x - lo < hi - x) return down;
  if (x - lo > hi - x) return up;
  return (down & 1) ? up : down;
}

}  // namespace

TEST_CASE("f16 -> f32 -> f16 round-trips every non-NaN half exactly") {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto half = static_cast<std::uint16_t>(h);
    const float f = f16_to_f32(half);
    if ((half & 0x7c00) == 0x7c00 && (half & 0x3ff) != 0) {
      CHECK(std::isnan(f));
      CHECK(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    CHECK(f32_to_f16(f) == half);
  }
}

TEST_CASE("f16 conversions agree with F16C on every half and on random floats") {
  if (!cpu_has_f16c()) {
    MESSAGE("CPU has no F16C: hardware comparison skipped");
    return;
  }
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto half = static_cast<std::uint16_t>(h);
    const float mine = f16_to_f32(half);
    const float hw = hw_f16_to_f32(half);
    if (std::isnan(hw)) {
      CHECK(std::isnan(mine));
    } else {
      CHECK(std::bit_cast<std::uint32_t>(mine) == std::bit_cast<std::uint32_t>(hw));
    }
  }
  std::mt19937 rng(42);
  std::uniform_int_distribution<std::uint32_t> bits;
  int mismatches = 0;
  for (int i = 0; i < 2'000'000; ++i) {
    const float f = std::bit_cast<float>(bits(rng));
    const std::uint16_t mine = f32_to_f16(f);
    const std::uint16_t hw = hw_f32_to_f16(f);
    if (std::isnan(f)) {
      mismatches += (mine & 0x7c00) != 0x7c00 || (mine & 0x3ff) == 0;
    } else {
      mismatches += mine != hw;
    }
  }
  // Floats near the half range, where rounding and subnormals matter most.
  std::uniform_real_distribution<float> near(-70000.f, 70000.f);
  std::uniform_real_distribution<float> tiny(-1e-4f, 1e-4f);
  for (int i = 0; i < 1'000'000; ++i) {
    for (float f : {near(rng), tiny(rng)}) mismatches += f32_to_f16(f) != hw_f32_to_f16(f);
  }
  CHECK(mismatches == 0);
}

TEST_CASE("f16 special values") {
  CHECK(f32_to_f16(1.0f) == 0x3c00);
  CHECK(f32_to_f16(-2.0f) == 0xc000);
  CHECK(f32_to_f16(65504.0f) == 0x7bff);
  CHECK(f32_to_f16(65520.0f) == 0x7c00);  // halfway to the next binade rounds to infinity
  CHECK(f32_to_f16(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(f32_to_f16(-0.0f) == 0x8000);
  CHECK(f32_to_f16(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(f32_to_f16(std::ldexp(1.0f, -26)) == 0x0000);  // below half of it rounds to zero
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(f16_to_f32(0x7bff) == 65504.0f);
}

TEST_CASE("bf16 rounds to nearest even and keeps NaN and infinities") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> bits;
  int mismatches = 0;
  for (int i = 0; i < 2'000'000; ++i) {
    const float f = std::bit_cast<float>(bits(rng));
    if (std::isnan(f)) {
      const std::uint16_t b = f32_to_bf16(f);
      mismatches += !std::isnan(bf16_to_f32(b));
      continue;
    }
    mismatches += f32_to_bf16(f) != bf16_by_definition(f);
  }
  CHECK(mismatches == 0);
  CHECK(f32_to_bf16(1.0f) == 0x3f80);
  CHECK(f32_to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(f32_to_bf16(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(f32_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds up to infinity
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0x7f800001u)))));  // low-payload NaN
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1).
  CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  CHECK(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
}
