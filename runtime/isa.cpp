// CPU feature detection, done here rather than by xsimd 8.1, whose cpuid neither checks XCR0
// (whether the OS saves AVX state) nor reports F16C.
#include "embedrt/isa.hpp"

#include <cpuid.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace embedrt {
namespace {

struct CpuFeatures {
  bool sse42 = false, avx2 = false, fma = false, f16c = false, avx512 = false;
};

std::uint64_t read_xcr0() {
  std::uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<std::uint64_t>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  f.sse42 = (ecx >> 20) & 1;
  const bool osxsave = (ecx >> 27) & 1;
  const bool avx = (ecx >> 28) & 1;
  f.fma = (ecx >> 12) & 1;
  f.f16c = (ecx >> 29) & 1;
  if (!osxsave || !avx) return f;
  const std::uint64_t xcr0 = read_xcr0();
  const bool os_avx = (xcr0 & 0x6) == 0x6;             // XMM and YMM state
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
  if (!os_avx) {
    f.fma = f.f16c = false;
    return f;
  }
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    f.avx2 = (ebx >> 5) & 1;
    const bool avx512f = (ebx >> 16) & 1, avx512bw = (ebx >> 30) & 1, avx512vl = (ebx >> 31) & 1;
    f.avx512 = os_avx512 && avx512f && avx512bw && avx512vl;
  }
#endif
  return f;
}

const CpuFeatures& features() {
  static const CpuFeatures f = detect();
  return f;
}

}  // namespace

std::string_view isa_name(Isa isa) noexcept {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kSse42: return "sse4.2";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

std::optional<Isa> parse_isa(std::string_view name) noexcept {
  for (Isa isa : {Isa::kScalar, Isa::kSse42, Isa::kAvx2, Isa::kAvx512}) {
    if (name == isa_name(isa)) return isa;
  }
  return std::nullopt;
}

bool isa_supported(Isa isa) {
  const CpuFeatures& f = features();
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kSse42: return f.sse42;
    case Isa::kAvx2: return f.avx2 && f.fma && f.f16c;
    case Isa::kAvx512: return f.avx512 && f.avx2 && f.fma && f.f16c;
  }
  return false;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kScalar, Isa::kSse42, Isa::kAvx2, Isa::kAvx512}) {
    if (isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

Isa default_isa() {
  static const Isa chosen = [] {
    if (const char* forced = std::getenv("EMBEDRT_ISA")) {
      const auto isa = parse_isa(forced);
      if (isa && isa_supported(*isa)) return *isa;
      // An unknown or unsupported value falls back to the best ISA rather than failing every
      // call; Embedder::create reports it when asked for explicitly.
    }
    return supported_isas().back();
  }();
  return chosen;
}

}  // namespace embedrt
