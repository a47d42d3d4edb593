// The mappings the fault guard (embedrt/fault_guard.hpp) protects: a fixed table of address
// ranges that a signal handler can read without locks or allocation. Each MappedFile takes a
// slot while it is mapped; the slot also counts pages lost to truncation.
#pragma once

#include <cstddef>
#include <cstdint>

namespace embedrt::detail {

inline constexpr int kNoFaultSlot = -1;

// A slot for [begin, begin + size), or kNoFaultSlot when all are taken (the mapping then goes
// unprotected: a truncation would crash as without the guard).
int register_mapping(const void* begin, std::size_t size) noexcept;
void unregister_mapping(int slot) noexcept;
// Pages of the mapping in `slot` replaced by zeros since it was registered.
std::uint64_t mapping_faults(int slot) noexcept;

}  // namespace embedrt::detail
