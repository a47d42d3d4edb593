// Headers every per-ISA kernel unit includes before opening its namespace.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "embedrt/half.hpp"
#include "kernels/kernel_args.hpp"
#include "layout.hpp"
