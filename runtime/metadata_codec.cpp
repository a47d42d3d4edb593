#include "metadata_codec.hpp"

#include <bit>
#include <cmath>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include "byte_io.hpp"
#include "layout.hpp"
#include "output_rule_keys.hpp"
#include "utf8.hpp"

namespace embedrt::detail {
namespace {

namespace rec = metadata_record;

void append_record(std::vector<std::byte>& out, std::string_view key, std::uint8_t type,
                   std::span<const std::byte> value) {
  const std::size_t start = out.size();
  const std::size_t total = align_up(rec::kHeaderSize + key.size() + value.size(), 8);
  out.resize(start + total);
  std::byte* p = out.data() + start;
  store_le<std::uint16_t>(p, static_cast<std::uint16_t>(key.size()));
  store_le<std::uint8_t>(p + 2, type);
  store_le<std::uint32_t>(p + 4, static_cast<std::uint32_t>(value.size()));
  std::memcpy(p + rec::kHeaderSize, key.data(), key.size());
  if (!value.empty()) std::memcpy(p + rec::kHeaderSize + key.size(), value.data(), value.size());
}

void append_u64(std::vector<std::byte>& out, std::string_view key, std::uint64_t v) {
  std::byte bytes[8];
  store_le(bytes, v);
  append_record(out, key, rec::kU64, bytes);
}

void append_i64(std::vector<std::byte>& out, std::string_view key, std::int64_t v) {
  std::byte bytes[8];
  store_le(bytes, static_cast<std::uint64_t>(v));
  append_record(out, key, rec::kI64, bytes);
}

void append_f64(std::vector<std::byte>& out, std::string_view key, double v) {
  std::byte bytes[8];
  store_le(bytes, v);
  append_record(out, key, rec::kF64, bytes);
}

void append_string(std::vector<std::byte>& out, std::string_view key, std::string_view v) {
  append_record(out, key, rec::kString, std::as_bytes(std::span(v.data(), v.size())));
}

const OutputRuleKey* primary_rule(std::string_view key) {
  for (const OutputRuleKey& k : output_rule_keys()) {
    if (!k.primary_key.empty() && k.primary_key == key) return &k;
  }
  return nullptr;
}

const OutputRuleKey* output_rule(std::string_view rule) {
  for (const OutputRuleKey& k : output_rule_keys()) {
    if (!k.output_key.empty() && k.output_key == rule) return &k;
  }
  return nullptr;
}

// "outputs.<name>.<rule>" split into its name and rule, for a rule of output_rule_keys().
struct OutputKey {
  std::string_view name;
  const OutputRuleKey* rule;
};
std::optional<OutputKey> split_output_key(std::string_view key) {
  constexpr std::string_view kPrefix = "outputs.";
  if (key.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  const std::string_view rest = key.substr(kPrefix.size());
  const std::size_t dot = rest.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const OutputRuleKey* rule = output_rule(rest.substr(dot + 1));
  if (rule == nullptr) return std::nullopt;
  return OutputKey{rest.substr(0, dot), rule};
}

// Keys with a typed field in Metadata (FORMAT.md section 5); all others live in Metadata::extra.
bool is_typed_key(std::string_view key) {
  for (std::string_view typed : {"model.family", "source.files", "source.dtype"}) {
    if (key == typed) return true;
  }
  return primary_rule(key) != nullptr || split_output_key(key).has_value();
}

}  // namespace

bool valid_metadata_key(std::string_view key) {
  if (key.empty() || key.size() > 255) return false;
  for (char c : key) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_')) return false;
  }
  return true;
}

namespace {

const char* type_name(std::uint8_t type) {
  switch (type) {
    case rec::kU64: return "u64";
    case rec::kI64: return "i64";
    case rec::kF64: return "f64";
    case rec::kString: return "string";
  }
  return "unknown";
}

Error malformed(std::string message) {
  return Error(ErrorCode::kMalformed, "metadata: " + std::move(message));
}

void append_value(std::vector<std::byte>& out, std::string_view key, const MetadataValue& value) {
  std::visit([&](const auto& v) {
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<T, std::uint64_t>) append_u64(out, key, v);
    else if constexpr (std::is_same_v<T, std::int64_t>) append_i64(out, key, v);
    else if constexpr (std::is_same_v<T, double>) append_f64(out, key, v);
    else append_string(out, key, v);
  }, value);
}

std::string output_key(std::string_view output, std::string_view rule) {
  return "outputs." + std::string(output) + "." + std::string(rule);
}

}  // namespace

std::vector<std::byte> encode_metadata(const Metadata& m) {
  std::vector<std::byte> out;
  append_string(out, "model.family", m.family);
  append_string(out, "source.files", m.source_files);
  append_string(out, "source.dtype", m.source_dtype);
  // The primary output: the 1.0 keys always (so 1.0-expressible files keep their bytes), newer
  // keys only when they differ from their defaults (so such files stay 1.0 or 1.1).
  for (const auto& [key, value] : output_rule_values(m.primary(), true)) append_value(out, key, value);
  // Other outputs: every rule that differs from its default.
  for (const OutputRules& o : m.outputs) {
    for (const auto& [rule, value] : output_rule_values(o, false)) append_value(out, output_key(o.name, rule), value);
  }
  for (const auto& [key, value] : m.extra) {
    if (is_typed_key(key)) continue;  // the typed field is the source of truth
    append_value(out, key, value);
  }
  return out;
}

Result<Metadata> decode_metadata(std::span<const std::byte> block) {
  Metadata m;
  std::set<std::string, std::less<>> seen;
  std::size_t pos = 0;
  while (pos < block.size()) {
    const std::size_t left = block.size() - pos;
    const std::byte* p = block.data() + pos;
    if (left < rec::kHeaderSize) {
      // Only zero padding may follow the last record.
      for (std::size_t i = 0; i < left; ++i) {
        if (p[i] != std::byte{0}) {
          return malformed("trailing byte at block offset " + std::to_string(pos + i));
        }
      }
      break;
    }
    const auto key_size = load_le<std::uint16_t>(p);
    const auto type = load_le<std::uint8_t>(p + 2);
    const auto value_size = load_le<std::uint32_t>(p + 4);
    if (key_size == 0 && type == 0 && value_size == 0) {
      // A zero record header: only padding may follow.
      for (std::size_t i = 0; i < left; ++i) {
        if (p[i] != std::byte{0}) {
          return malformed("record at block offset " + std::to_string(pos) +
                           " has key_size 0");
        }
      }
      break;
    }
    const std::uint64_t record_size =
        align_up(std::uint64_t{rec::kHeaderSize} + key_size + value_size, 8);
    if (record_size > left) {
      return malformed("record at block offset " + std::to_string(pos) + " (key_size " +
                       std::to_string(key_size) + ", value_size " + std::to_string(value_size) +
                       ") runs past the end of the block (" + std::to_string(left) +
                       " bytes left)");
    }
    const std::string_view key(reinterpret_cast<const char*>(p + rec::kHeaderSize), key_size);
    if (!valid_metadata_key(key)) {
      return malformed("record at block offset " + std::to_string(pos) +
                       " has an invalid key (must be 1-255 of [a-z0-9._])");
    }
    if (type < rec::kU64 || type > rec::kString) {
      return malformed("key '" + std::string(key) + "' has unknown type " + std::to_string(type));
    }
    if (type != rec::kString && value_size != 8) {
      return malformed("key '" + std::string(key) + "' of type " + type_name(type) +
                       " has value_size " + std::to_string(value_size) + ", expected 8");
    }
    if (!seen.insert(std::string(key)).second) {
      return malformed("duplicate key '" + std::string(key) + "'");
    }
    const std::byte* value = p + rec::kHeaderSize + key_size;
    const std::string_view text(reinterpret_cast<const char*>(value), value_size);
    if (type == rec::kString && !valid_utf8(text)) {
      return malformed("key '" + std::string(key) + "': string value is not valid UTF-8");
    }

    auto want = [&](std::uint8_t expected) -> Status {
      if (type != expected) {
        return malformed("key '" + std::string(key) + "' has type " + type_name(type) +
                         ", expected " + type_name(expected));
      }
      return {};
    };
    MetadataValue decoded;
    switch (type) {
      case rec::kU64: decoded = load_le<std::uint64_t>(value); break;
      case rec::kI64: decoded = static_cast<std::int64_t>(load_le<std::uint64_t>(value)); break;
      case rec::kF64: decoded = load_le<double>(value); break;
      default: decoded = std::string(text); break;
    }
    Status typed;
    if (key == "model.family") {
      if (typed = want(rec::kString); typed) m.family = std::string(text);
    } else if (key == "source.files") {
      if (typed = want(rec::kString); typed) m.source_files = std::string(text);
    } else if (key == "source.dtype") {
      if (typed = want(rec::kString); typed) m.source_dtype = std::string(text);
    } else if (const OutputRuleKey* rule = primary_rule(key)) {
      if (typed = want(rule->type); typed) {
        if (Status s = rule->read(m, decoded); !s) return malformed(std::string(key) + " " + s.error().message());
      }
    } else if (const auto output = split_output_key(key)) {
      if (typed = want(output->rule->type); typed) {
        if (!is_valid_output_name(output->name)) {
          return malformed("key '" + std::string(key) + "': output name '" + std::string(output->name) +
                           "' is longer than 63 bytes");
        }
        OutputRules* rules = nullptr;
        for (OutputRules& o : m.outputs) {
          if (o.name == output->name) rules = &o;
        }
        if (rules == nullptr) {
          rules = &m.outputs.emplace_back();
          rules->name = std::string(output->name);
        }
        if (Status s = output->rule->read(*rules, decoded); !s) return malformed(std::string(key) + " " + s.error().message());
      }
    } else {
      m.extra.emplace(std::string(key), std::move(decoded));
    }
    if (!typed) return Error(typed.error());
    pos += record_size;
  }
  for (const OutputRules& o : m.outputs) {
    if (o.token_table.empty()) {
      return malformed("output '" + o.name + "' has rules but no token table (key 'outputs." + o.name + ".token')");
    }
    if (o.name == m.name) return malformed("output '" + o.name + "' is defined twice (output.name and outputs." + o.name + ".*)");
  }
  return m;
}

}  // namespace embedrt::detail
