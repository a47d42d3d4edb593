// A bounds-checked reader over untrusted bytes: every read either succeeds inside the span or
// returns false, so parsers never compute an address outside their input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace embedrt::import {

class ByteCursor {
 public:
  explicit ByteCursor(std::span<const std::byte> bytes, std::size_t position = 0)
      : bytes_(bytes), position_(position <= bytes.size() ? position : bytes.size()) {}

  std::size_t position() const noexcept { return position_; }
  std::size_t remaining() const noexcept { return bytes_.size() - position_; }
  bool at_end() const noexcept { return position_ == bytes_.size(); }

  template <typename T>
  bool read_le(T& value) noexcept {
    if (remaining() < sizeof(T)) return false;
    std::memcpy(&value, bytes_.data() + position_, sizeof(T));
    position_ += sizeof(T);
    return true;
  }

  bool read_bytes(std::size_t n, std::span<const std::byte>& out) noexcept {
    if (remaining() < n) return false;
    out = bytes_.subspan(position_, n);
    position_ += n;
    return true;
  }

  bool read_string(std::size_t n, std::string_view& out) noexcept {
    std::span<const std::byte> raw;
    if (!read_bytes(n, raw)) return false;
    out = {reinterpret_cast<const char*>(raw.data()), raw.size()};
    return true;
  }

  // Reads up to and excluding '\n' (consumed), at most `limit` bytes.
  bool read_line(std::size_t limit, std::string_view& out) noexcept {
    for (std::size_t i = position_; i < bytes_.size() && i - position_ <= limit; ++i) {
      if (bytes_[i] == std::byte{'\n'}) {
        out = {reinterpret_cast<const char*>(bytes_.data() + position_), i - position_};
        position_ = i + 1;
        return true;
      }
    }
    return false;
  }

  bool skip(std::size_t n) noexcept {
    if (remaining() < n) return false;
    position_ += n;
    return true;
  }

 private:
  std::span<const std::byte> bytes_;
  std::size_t position_;
};

}  // namespace embedrt::import
