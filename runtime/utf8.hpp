// Whether bytes are well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, at most
// U+10FFFF). FORMAT.md requires it of table names and string metadata, so every tool can print
// them and every JSON document that carries them is valid.
#pragma once

#include <cstddef>
#include <string_view>

namespace embedrt::detail {

inline bool valid_utf8(std::string_view s) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned c = p[i];
    std::size_t len;
    unsigned min;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xe0) == 0xc0) { len = 2; min = 0x80; }
    else if ((c & 0xf0) == 0xe0) { len = 3; min = 0x800; }
    else if ((c & 0xf8) == 0xf0) { len = 4; min = 0x10000; }
    else return false;
    if (n - i < len) return false;
    unsigned cp = c & (0x7fu >> len);
    for (std::size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

}  // namespace embedrt::detail
