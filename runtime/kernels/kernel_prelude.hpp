// Headers every per-ISA kernel unit includes before opening its namespace.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "embedrt/half.hpp"
#include "kernels/kernel_args.hpp"
