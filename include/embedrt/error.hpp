// Errors as values: every fallible call returns Status or Result<T>. The library never
// aborts and never writes to stderr; the message names the offending field or value.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace embedrt {

enum class ErrorCode {
  kOk = 0,
  kIo,                  // the operating system refused (open, mmap, write, rename, ...)
  kNoSpace,             // the disk filled up while writing
  kAlreadyExists,       // the target exists and overwrite was not asked for
  kNotFound,            // a file, table or tensor that is not there
  kBadMagic,            // not an .embt file, or damaged by a text-mode transfer
  kUnsupportedVersion,  // a major version this reader does not implement
  kMalformed,           // a field breaks a rule of docs/FORMAT.md
  kChecksumMismatch,    // stored and computed checksums differ
  kInvalidArgument,     // a caller passed a wrong shape, size or option
  kOutOfRange,          // an id, segment or position past its table
  kUnsupported,         // valid, but not implemented by this build
};

// Stable name of an error code, e.g. "malformed".
const char* error_code_name(ErrorCode code) noexcept;

class Error {
 public:
  Error(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  ErrorCode code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }

 private:
  ErrorCode code_;
  std::string message_;
};

// A value or an error. Deliberately small: C++20 has no std::expected.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Error error) : state_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const noexcept { return state_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & { assert(ok()); return std::get<0>(state_); }
  const T& value() const& { assert(ok()); return std::get<0>(state_); }
  T&& value() && { assert(ok()); return std::get<0>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const& { assert(!ok()); return std::get<1>(state_); }
  Error&& error() && { assert(!ok()); return std::get<1>(std::move(state_)); }

 private:
  std::variant<T, Error> state_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), failed_(true) {}  // NOLINT

  bool ok() const noexcept { return !failed_; }
  explicit operator bool() const noexcept { return ok(); }
  const Error& error() const& { assert(failed_); return error_; }
  Error&& error() && { assert(failed_); return std::move(error_); }

 private:
  Error error_{ErrorCode::kOk, {}};
  bool failed_ = false;
};

using Status = Result<void>;

}  // namespace embedrt
