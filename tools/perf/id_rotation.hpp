// The random ids a benchmark rotates through between calls, and the table rows they touch. One
// model of uniform draws with replacement for `embedrt bench` and bench/kernel_bench.cpp
// (bench/compare.py writes the same formulas in Python): a table past the last-level cache is
// only read from DRAM if the rows the rotation touches are past it too.
#pragma once

#include <cstdint>

namespace embedrt::perf {

// The bytes of the distinct rows `draws` uniform random ids touch in a table of `rows` rows:
// rows * (1 - (1 - 1/rows)^draws) expected rows, times the row stride.
std::uint64_t touched_bytes(std::uint64_t rows, std::uint64_t stride, std::uint64_t draws);

// How many batches of `tokens` random ids to rotate through so that the rows they touch are 4x
// `llc_bytes` (or 98% of a smaller table's rows): at least 8, at most 256 MiB of int64 ids.
std::uint64_t id_sets_for(std::uint64_t rows, std::uint64_t stride, std::uint64_t tokens, std::uint64_t llc_bytes);

}  // namespace embedrt::perf
