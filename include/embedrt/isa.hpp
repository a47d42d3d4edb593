// Instruction sets the kernels are built for, and which of them this CPU and OS can run.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "embedrt/error.hpp"

namespace embedrt {

enum class Isa {
  kScalar,  // portable C++
  kSse42,   // SSE4.2 (x86-64-v2)
  kAvx2,    // AVX2 + FMA + F16C (x86-64-v3)
  kAvx512,  // AVX-512 F/BW/VL/DQ (x86-64-v4)
  kAvx512Bf16,  // AVX-512 with the BF16 conversion (Cooper Lake, Sapphire Rapids, Zen 4 and later)
};

// Every ISA the library has kernels for, in order (best last).
inline constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kSse42, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16};

std::string_view isa_name(Isa isa) noexcept;  // "scalar", "sse4.2", "avx2", "avx512", "avx512bf16"
std::optional<Isa> parse_isa(std::string_view name) noexcept;

// Every ISA this library has kernels for and this machine can run, best last. Detection checks
// CPUID and that the OS saves the vector state (XGETBV), so AVX paths are never picked under an OS
// that would fault on them.
std::vector<Isa> supported_isas();
bool isa_supported(Isa isa);
// Whether this library was compiled with kernels for `isa`: always, unless it was configured with
// EMBEDRT_ISAS=host (cmake/KernelIsas.cmake), which leaves out what the build machine cannot run.
bool isa_built(Isa isa) noexcept;

Isa best_isa();               // the last of supported_isas()
std::string supported_list();  // "scalar, sse4.2, avx2, avx512"
std::string known_list();      // every ISA's name: "scalar, sse4.2, avx2, avx512, avx512bf16"

// The ISA an Embedder uses when none is asked for, by the one rule for EMBEDRT_ISA: unset or
// empty, the best supported; a name of a supported ISA, that one; anything else an error that
// names the value (kInvalidArgument for an unknown name, kUnsupported for one this CPU lacks).
// Read on every call, so a test can change it.
Result<Isa> default_isa();

}  // namespace embedrt
