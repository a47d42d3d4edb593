// SSE4.2 build of the roofline kernels (the sse4.2 row of runtime/kernels/isa_table.def): element
// by element, vectorized by the compiler if at all. Measured rooflines here use the avx2/avx512 builds.
#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "embedrt/half.hpp"
#include "roofline_kernels.hpp"

namespace embedrt::perf::sse42 {

#include "roofline_element_traits.inl"

#include "roofline_body.inl"

}  // namespace embedrt::perf::sse42

namespace embedrt::perf {
const RooflineKernels& sse42_roofline() { return sse42::kRoofline; }
}  // namespace embedrt::perf
