#include "text_format.hpp"


#include "commands.hpp"
#include "float_text.hpp"

namespace embedrt::cli {

std::string format_float(float value) {
  std::string text;
  text::append_float(text, value);
  return text;
}

namespace {

// Length of the valid UTF-8 sequence starting at text[i], or 0.
std::size_t utf8_length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(i);
  std::size_t n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
  if (n == 0 || i + n > text.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
  }
  return n;
}

// The code point of one valid UTF-8 sequence.
char32_t code_point(std::string_view sequence) {
  const auto b = [&](std::size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(sequence[k])); };
  switch (sequence.size()) {
    case 2: return (b(0) & 0x1f) << 6 | (b(1) & 0x3f);
    case 3: return (b(0) & 0x0f) << 12 | (b(1) & 0x3f) << 6 | (b(2) & 0x3f);
    default: return (b(0) & 0x07) << 18 | (b(1) & 0x3f) << 12 | (b(2) & 0x3f) << 6 | (b(3) & 0x3f);
  }
}

// Valid UTF-8 that a terminal acts on instead of showing: the C1 controls (U+009B is CSI, the
// start of an escape sequence) and the bidirectional overrides that reorder what is displayed.
bool is_terminal_control(char32_t c) {
  return (c >= 0x80 && c <= 0x9f) || (c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069) || c == 0x2028 ||
         c == 0x2029;
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c == '\n') {  // multi-line messages (candidate lists) keep their lines
      out += '\n';
      ++i;
      continue;
    }
    if (const std::size_t n = c >= 0x80 ? utf8_length(text, i) : 0; n > 0) {
      const char32_t code = code_point(text.substr(i, n));
      if (is_terminal_control(code)) {
        char escaped[12];
        std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(code));
        out += escaped;
      } else {
        out.append(text.substr(i, n));
      }
      i += n;
      continue;
    }
    char escaped[5];
    std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
    out += escaped;
    ++i;
  }
  return out;
}

std::optional<OutputDType> parse_output_dtype(std::string_view name) {
  if (name == "f32") return OutputDType::kF32;
  if (name == "bf16") return OutputDType::kBF16;
  if (name == "f16") return OutputDType::kF16;
  return std::nullopt;
}

// The library names its options as `api_field`; on the command line they are flags.
std::string with_flag_names(std::string message) {
  static const std::pair<std::string_view, std::string_view> kFlags[] = {
      {"`preset`", "--preset"}, {"`config_path`", "--config"}, {"`ignore_config`", "--ignore-config"},
      {"`overrides.token`", "--token"}, {"`overrides.position`", "--position"}, {"`overrides.segment`", "--segment"},
      {"`overrides.norm_weight`", "--norm-weight"}, {"`overrides.norm_bias`", "--norm-bias"}, {"`key`", "--key"},
      {"`check_crc=false`", "--no-crc-check"}, {"`overwrite`", "--force"}, {"table `dtype`", "--dtype"},
      {"`allow_overflow`", "--allow-overflow"}, {"`pooling`", "--pooling"}, {"`mode`", "--mode"},
      {"a `context` of", "--context of"},
  };
  for (const auto& [field, flag] : kFlags) {
    for (std::size_t at = message.find(field); at != std::string::npos; at = message.find(field, at + flag.size())) {
      message.replace(at, field.size(), flag);
    }
  }
  return message;
}

int report(const Error& error) {
  std::fprintf(stderr, "embedrt: error: %s\n", printable(with_flag_names(error.message())).c_str());
  return exit_code_for(error.code());
}

}  // namespace embedrt::cli
