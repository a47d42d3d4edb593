// Small formatting helpers shared by the subcommands.
#pragma once

#include <cstdio>
#include <string>

#include "embedrt/error.hpp"

namespace embedrt::cli {

// Shortest decimal that reads back as the same float32; NaN and infinities as Python's json
// module writes them (NaN, Infinity, -Infinity).
std::string format_float(float value);

// "embedrt: error: <message>" on stderr; returns kExitFailure (or kExitUsage for bad arguments).
int report(const Error& error);

}  // namespace embedrt::cli
