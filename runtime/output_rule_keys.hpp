// The metadata keys of an output's rules (FORMAT.md section 5), as one table that both the
// encoder and the decoder walk: the primary output's keys stand alone ("token.scale"), every
// other output's sit under "outputs.<name>." ("outputs.per_layer_inputs.token.scale").
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "embedrt/error.hpp"
#include "embedrt/format.hpp"

namespace embedrt::detail {

struct OutputRuleKey {
  std::string_view primary_key;  // key of the primary output's rule; empty: other outputs only
  std::string_view output_key;   // key under outputs.<name>.; empty: the primary output only
  std::uint8_t type;             // metadata_record::kU64 ... kString
  // Written at its default too (the 1.0 keys, so files written before 1.2 keep their bytes).
  bool always_written;
  // Stores a decoded value into the rules, or says why it is invalid (the caller names the key).
  Status (*read)(OutputRules& rules, const MetadataValue& value);
  // The value to write, or nullopt when the rule has its default (and need not be written).
  std::optional<MetadataValue> (*write)(const OutputRules& rules);
};

std::span<const OutputRuleKey> output_rule_keys();

// "30,256" <-> {30, 256}: positive decimal integers, comma separated.
std::optional<std::vector<std::uint64_t>> parse_shape(std::string_view text);
std::string shape_text(std::span<const std::uint64_t> shape);

}  // namespace embedrt::detail
