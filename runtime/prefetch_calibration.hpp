// PrefetchLevel::kAuto: which prefetch level this machine's memory rewards, measured once per
// process by running the gather kernels of both levels over a private table past the LLC, and how
// far ahead its rows of up to 1 KiB are prefetched, by that level's bag kernel at two distances.
#pragma once

#include "embedrt/embedder.hpp"
#include "kernels/kernel_args.hpp"

namespace embedrt::detail {

// The measurement behind prefetch_calibration(isa, huge_pages), cached per (ISA, page size):
// `into_l1` and `into_l2` are that ISA's f32 -> f32 gather kernels of each level, `pool_l1` and
// `pool_l2` its f32 -> f32 bag kernels.
const PrefetchCalibration& calibrate_prefetch_level(Isa isa, bool huge_pages, kernels::RangeKernel into_l1,
                                                    kernels::RangeKernel into_l2, kernels::BagKernel pool_l1,
                                                    kernels::BagKernel pool_l2);

// One measurement, not cached (tests run it with any kernels, sanitized builds included).
PrefetchCalibration measure_prefetch_levels(bool huge_pages, kernels::RangeKernel into_l1, kernels::RangeKernel into_l2,
                                            kernels::BagKernel pool_l1, kernels::BagKernel pool_l2);

}  // namespace embedrt::detail
