// Portable build of the roofline kernels (baseline flags).
#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "embedrt/half.hpp"
#include "roofline_kernels.hpp"

namespace embedrt::perf::scalar {

#include "roofline_element_traits.inl"

#include "roofline_body.inl"

}  // namespace embedrt::perf::scalar

namespace embedrt::perf {
const RooflineKernels& scalar_roofline() { return scalar::kRoofline; }
}  // namespace embedrt::perf
