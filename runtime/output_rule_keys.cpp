#include "output_rule_keys.hpp"

#include <charconv>
#include <cmath>

#include "layout.hpp"

namespace embedrt::detail {
namespace {

namespace rec = metadata_record;
using Value = MetadataValue;
using Optional = std::optional<MetadataValue>;

Status invalid(std::string why) { return Error(ErrorCode::kMalformed, std::move(why)); }

// Table references: a table name (FORMAT.md 4: 1 to 63 bytes).
Status read_table(std::string& field, const Value& v) {
  const auto& name = std::get<std::string>(v);
  if (name.empty() || name.size() > kMaxNameBytes) return invalid("is empty or longer than 63 bytes (it names a table)");
  field = name;
  return {};
}
Optional write_table(const std::string& field) { return field.empty() ? Optional() : Optional(field); }

Status read_scale(double& field, const Value& v) {
  field = std::get<double>(v);
  if (!std::isfinite(field)) return invalid("is not finite");
  return {};
}
Optional write_scale(double field, bool always) { return always || field != 1.0 ? Optional(field) : Optional(); }

const OutputRuleKey kKeys[] = {
    // ---- the tables of outputs other than the primary one (which finds its tables by role) ----
    {"", "token", rec::kString, false, [](OutputRules& r, const Value& v) { return read_table(r.token_table, v); },
     [](const OutputRules& r) { return write_table(r.token_table); }},
    {"", "position", rec::kString, false, [](OutputRules& r, const Value& v) { return read_table(r.position_table, v); },
     [](const OutputRules& r) { return write_table(r.position_table); }},
    {"", "segment", rec::kString, false, [](OutputRules& r, const Value& v) { return read_table(r.segment_table, v); },
     [](const OutputRules& r) { return write_table(r.segment_table); }},
    {"", "norm_weight", rec::kString, false,
     [](OutputRules& r, const Value& v) { return read_table(r.norm_weight_table, v); },
     [](const OutputRules& r) { return write_table(r.norm_weight_table); }},
    {"", "norm_bias", rec::kString, false, [](OutputRules& r, const Value& v) { return read_table(r.norm_bias_table, v); },
     [](const OutputRules& r) { return write_table(r.norm_bias_table); }},
    // ---- the 1.0 and 1.1 rules, in the order writers have always written them ----
    {"context_length", "context_length", rec::kU64, true,
     [](OutputRules& r, const Value& v) -> Status {
       r.context_length = std::get<std::uint64_t>(v);
       return {};
     },
     [](const OutputRules& r) { return Optional(r.context_length); }},
    {"position.offset", "position.offset", rec::kU64, true,
     [](OutputRules& r, const Value& v) -> Status {
       r.position_offset = std::get<std::uint64_t>(v);
       return {};
     },
     [](const OutputRules& r) { return Optional(r.position_offset); }},
    {"position.kind", "", rec::kString, true,
     [](OutputRules& r, const Value& v) -> Status {
       auto kind = parse_position_kind(std::get<std::string>(v));
       if (!kind) return invalid("is '" + std::get<std::string>(v) + "', expected learned, sinusoidal or none");
       r.position_kind = *kind;
       return {};
     },
     [](const OutputRules& r) { return Optional(std::string(position_kind_name(r.position_kind))); }},
    {"output.scale", "output.scale", rec::kF64, true,
     [](OutputRules& r, const Value& v) { return read_scale(r.output_scale, v); },
     [](const OutputRules& r) { return write_scale(r.output_scale, true); }},
    {"norm.epsilon", "norm.epsilon", rec::kF64, true,
     [](OutputRules& r, const Value& v) -> Status {
       r.norm_epsilon = std::get<double>(v);
       if (!(r.norm_epsilon >= 0.0) || !std::isfinite(r.norm_epsilon)) return invalid("is negative or not finite");
       return {};
     },
     [](const OutputRules& r) { return Optional(r.norm_epsilon); }},
    {"token.scale", "token.scale", rec::kF64, false, [](OutputRules& r, const Value& v) { return read_scale(r.token_scale, v); },
     [](const OutputRules& r) { return write_scale(r.token_scale, false); }},
    {"position.padding_id", "position.padding_id", rec::kI64, false,
     [](OutputRules& r, const Value& v) -> Status {
       r.padding_id = std::get<std::int64_t>(v);
       if (r.padding_id < 0) return invalid("is negative");
       return {};
     },
     [](const OutputRules& r) { return r.padding_id >= 0 ? Optional(r.padding_id) : Optional(); }},
    // ---- 1.2: names, shapes, ids, pooling ----
    {"output.name", "", rec::kString, false,
     [](OutputRules& r, const Value& v) -> Status {
       r.name = std::get<std::string>(v);
       if (!is_valid_output_name(r.name)) return invalid("must be 1 to 63 bytes of [a-z0-9_]");
       return {};
     },
     [](const OutputRules& r) { return r.name == "embeddings" ? Optional() : Optional(r.name); }},
    {"output.shape", "shape", rec::kString, false,
     [](OutputRules& r, const Value& v) -> Status {
       auto shape = parse_shape(std::get<std::string>(v));
       if (!shape) return invalid("is '" + std::get<std::string>(v) + "', expected positive integers separated by commas");
       r.shape = std::move(*shape);
       return {};
     },
     [](const OutputRules& r) { return r.shape.empty() ? Optional() : Optional(shape_text(r.shape)); }},
    {"ids.out_of_range", "ids.out_of_range", rec::kString, false,
     [](OutputRules& r, const Value& v) -> Status {
       auto rule = parse_out_of_range_ids(std::get<std::string>(v));
       if (!rule) return invalid("is '" + std::get<std::string>(v) + "', expected refuse or row0");
       r.out_of_range = *rule;
       return {};
     },
     [](const OutputRules& r) {
       return r.out_of_range == OutOfRangeIds::kRefuse ? Optional() : Optional(std::string(out_of_range_ids_name(r.out_of_range)));
     }},
    {"pooling.mode", "pooling.mode", rec::kString, false,
     [](OutputRules& r, const Value& v) -> Status {
       auto mode = parse_pooling_mode(std::get<std::string>(v));
       if (!mode) return invalid("is '" + std::get<std::string>(v) + "', expected none, sum, mean or max");
       r.pooling = *mode;
       return {};
     },
     [](const OutputRules& r) {
       return r.pooling == PoolingMode::kNone ? Optional() : Optional(std::string(pooling_mode_name(r.pooling)));
     }},
    {"pooling.normalize", "pooling.normalize", rec::kU64, false,
     [](OutputRules& r, const Value& v) -> Status {
       const auto flag = std::get<std::uint64_t>(v);
       if (flag > 1) return invalid("is " + std::to_string(flag) + ", expected 0 or 1");
       r.normalize = flag == 1;
       return {};
     },
     [](const OutputRules& r) { return r.normalize ? Optional(std::uint64_t{1}) : Optional(); }},
    {"pooling.weights", "pooling.weights", rec::kString, false,
     [](OutputRules& r, const Value& v) { return read_table(r.pooling_weights_table, v); },
     [](const OutputRules& r) { return write_table(r.pooling_weights_table); }},
    // ---- 2.0 ----
    {"ids.map", "ids.map", rec::kString, false, [](OutputRules& r, const Value& v) { return read_table(r.id_map_table, v); },
     [](const OutputRules& r) { return write_table(r.id_map_table); }},
};

}  // namespace

std::span<const OutputRuleKey> output_rule_keys() { return kKeys; }

}  // namespace embedrt::detail

namespace embedrt {

std::vector<std::pair<std::string, MetadataValue>> output_rule_values(const OutputRules& rules, bool primary) {
  std::vector<std::pair<std::string, MetadataValue>> values;
  const OutputRules defaults;
  for (const detail::OutputRuleKey& k : detail::output_rule_keys()) {
    const std::string_view key = primary ? k.primary_key : k.output_key;
    if (key.empty()) continue;
    auto v = k.write(rules);
    if (!v || (!primary && v == k.write(defaults))) continue;
    values.emplace_back(std::string(key), std::move(*v));
  }
  return values;
}

}  // namespace embedrt

namespace embedrt::detail {

std::optional<std::vector<std::uint64_t>> parse_shape(std::string_view text) {
  std::vector<std::uint64_t> shape;
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    std::uint64_t n = 0;
    const char* first = text.data() + begin;
    const char* last = text.data() + end;
    const auto [ptr, ec] = std::from_chars(first, last, n);
    if (first == last || ec != std::errc() || ptr != last || n == 0 || shape.size() == 8) return std::nullopt;
    shape.push_back(n);
    if (end == text.size()) return shape;
    begin = end + 1;
  }
}

std::string shape_text(std::span<const std::uint64_t> shape) {
  std::string text;
  for (std::uint64_t n : shape) text += (text.empty() ? "" : ",") + std::to_string(n);
  return text;
}

}  // namespace embedrt::detail
