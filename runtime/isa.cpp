// CPU feature detection, done here rather than by xsimd 8.1, whose cpuid neither checks XCR0
// (whether the OS saves AVX state) nor reports F16C.
#include "embedrt/isa.hpp"

#include <cpuid.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace embedrt {
namespace {

// The CPU features kernels/isa_table.def may name, by their -m flag names.
struct CpuFeatures {
  bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512bf16 = false;

  // nullopt: a name isa_table.def uses that this detector does not know (a build error in spirit;
  // treated as absent, so the ISA is never chosen on a guess).
  std::optional<bool> has(std::string_view name) const {
    if (name == "sse4.2") return sse42;
    if (name == "avx") return avx;
    if (name == "avx2") return avx2;
    if (name == "fma") return fma;
    if (name == "f16c") return f16c;
    if (name == "avx512f") return avx512f;
    if (name == "avx512bw") return avx512bw;
    if (name == "avx512vl") return avx512vl;
    if (name == "avx512dq") return avx512dq;
    if (name == "avx512bf16") return avx512bf16;
    return std::nullopt;
  }
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
  const bool fma = (ecx >> 12) & 1, f16c = (ecx >> 29) & 1;
  if (!osxsave || !avx) return f;
  const std::uint64_t xcr0 = read_xcr0();
  const bool os_avx = (xcr0 & 0x6) == 0x6;                 // XMM and YMM state
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
  if (!os_avx) return f;  // VEX-encoded instructions (FMA, F16C too) would fault
  f.avx = true;
  f.fma = fma;
  f.f16c = f16c;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    f.avx2 = (ebx >> 5) & 1;
    if (os_avx512) {
      f.avx512f = (ebx >> 16) & 1;
      f.avx512dq = (ebx >> 17) & 1;
      f.avx512bw = (ebx >> 30) & 1;
      f.avx512vl = (ebx >> 31) & 1;
      // Leaf 7 sub-leaf 1, EAX bit 5: AVX512_BF16 (VCVTNEPS2BF16 and kin).
      unsigned eax1, ebx1, ecx1, edx1;
      if (eax >= 1 && __get_cpuid_count(7, 1, &eax1, &ebx1, &ecx1, &edx1)) f.avx512bf16 = (eax1 >> 5) & 1;
    }
  }
#endif
  return f;
}

const CpuFeatures& features() {
  static const CpuFeatures f = detect();
  return f;
}

// kernels/isa_table.def: the features each kernel build was compiled for.
std::string_view required_features(Isa isa) {
  switch (isa) {
#define EMBEDRT_ISA_ROW(enumerator, unit, features) \
  case Isa::enumerator:                             \
    return features;
#include "kernels/isa_table.def"
#undef EMBEDRT_ISA_ROW
    case Isa::kScalar: break;
  }
  return "";
}

}  // namespace

std::string_view isa_name(Isa isa) noexcept {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kSse42: return "sse4.2";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Bf16: return "avx512bf16";
  }
  return "?";
}

std::optional<Isa> parse_isa(std::string_view name) noexcept {
  for (Isa isa : kAllIsas) {
    if (name == isa_name(isa)) return isa;
  }
  return std::nullopt;
}

bool isa_built(Isa isa) noexcept {
  switch (isa) {
#define EMBEDRT_ISA_ROW(enumerator, unit, features) \
  case Isa::enumerator:                             \
    return EMBEDRT_BUILT_##unit != 0;
#include "kernels/isa_table.def"
#undef EMBEDRT_ISA_ROW
    case Isa::kScalar: break;
  }
  return true;
}

bool isa_supported(Isa isa) {
  if (!isa_built(isa)) return false;
  std::string_view features_left = required_features(isa);
  while (!features_left.empty()) {
    const std::size_t space = features_left.find(' ');
    const std::string_view feature = features_left.substr(0, space);
    features_left = space == std::string_view::npos ? std::string_view{} : features_left.substr(space + 1);
    if (feature.empty()) continue;
    if (!features().has(feature).value_or(false)) return false;
  }
  return true;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> isas;
  for (Isa isa : kAllIsas) {
    if (isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

Isa best_isa() { return supported_isas().back(); }

Result<Isa> default_isa() {
  const char* forced = std::getenv("EMBEDRT_ISA");
  if (forced == nullptr || *forced == '\0') return best_isa();
  const auto isa = parse_isa(forced);
  if (!isa) {
    return Error(ErrorCode::kInvalidArgument,
                 std::string("EMBEDRT_ISA='") + forced + "' is not one of " + known_list());
  }
  if (!isa_supported(*isa)) {
    const char* why = isa_built(*isa) ? ": this CPU/OS does not support it" : ": this library was built without it";
    return Error(ErrorCode::kUnsupported,
                 "EMBEDRT_ISA=" + std::string(isa_name(*isa)) + why + " (supported: " + supported_list() + ")");
  }
  return *isa;
}

std::string known_list() {
  std::string list;
  for (Isa isa : kAllIsas) list += std::string(list.empty() ? "" : ", ") + std::string(isa_name(isa));
  return list;
}

std::string supported_list() {
  std::string list;
  for (Isa isa : supported_isas()) list += std::string(list.empty() ? "" : ", ") + std::string(isa_name(isa));
  return list;
}

}  // namespace embedrt
