// The metadata block of docs/FORMAT.md section 5: typed key/value records.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "embedrt/error.hpp"
#include "embedrt/format.hpp"

namespace embedrt::detail {

// Keys are 1-255 bytes of [a-z0-9._] (FORMAT.md section 5).
bool valid_metadata_key(std::string_view key);

std::vector<std::byte> encode_metadata(const Metadata& metadata);

// Parses and validates a block; unknown keys are skipped, known keys must have their type.
Result<Metadata> decode_metadata(std::span<const std::byte> block);

}  // namespace embedrt::detail
