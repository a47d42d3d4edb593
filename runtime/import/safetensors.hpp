// The safetensors format: an 8-byte header length, a JSON header, then one data buffer.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "embedrt/error.hpp"
#include "embedrt/import.hpp"

namespace embedrt::import {

inline constexpr std::uint64_t kMaxSafetensorsHeader = 100'000'000;

// Validates the header by the reference rules (size cap, '{' first, known dtypes, offsets that
// cover the buffer contiguously from 0, end - begin = numel x size, exact file length, no
// duplicate names) and returns the tensors as views of `file`.
Result<std::vector<SourceTensor>> load_safetensors(std::span<const std::byte> file, const std::string& label);

}  // namespace embedrt::import
