// Errors as values: every fallible call returns Status or Result<T>. The library never
// aborts and never writes to stderr; the message names the offending field or value, and the
// context says the same in fields a program can act on. Asking a failed Result for its value
// throws BadResultAccess (a bug in the caller, but never undefined behaviour).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
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

// Where an error points, for programs that act on it without reading the message (the server
// maps `field` to the protocol input at fault). Every member is optional.
struct ErrorContext {
  std::string file;                     // the file at fault
  std::optional<std::uint64_t> offset;  // byte offset in it
  std::string tensor;                   // tensor or table name
  // The API field at fault: a request field ("ids", "segment_ids", "start_positions",
  // "position_ids", "sequence_offsets", "output") or an option ("preset", "config_path", ...).
  std::string field;
  std::optional<std::uint64_t> sequence, position;  // for request errors: which token
};

class Error {
 public:
  Error(ErrorCode code, std::string message, ErrorContext context = {})
      : code_(code), message_(std::move(message)), context_(std::move(context)) {}
  ErrorCode code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  const ErrorContext& context() const noexcept { return context_; }

 private:
  ErrorCode code_;
  std::string message_;
  ErrorContext context_;
};

// Thrown by Result::value() on an error and Result::error() on a value: a programming error, made
// a defined failure (the message is the error's) rather than undefined behaviour.
class BadResultAccess : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// A value or an error. Deliberately small: C++20 has no std::expected.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Error error) : state_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const noexcept { return state_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & { check_value(); return std::get<0>(state_); }
  const T& value() const& { check_value(); return std::get<0>(state_); }
  T&& value() && { check_value(); return std::get<0>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const& { check_error(); return std::get<1>(state_); }
  Error&& error() && { check_error(); return std::get<1>(std::move(state_)); }

 private:
  void check_value() const {
    if (!ok()) throw BadResultAccess("embedrt: value() of a failed Result: " + std::get<1>(state_).message());
  }
  void check_error() const {
    if (ok()) throw BadResultAccess("embedrt: error() of a successful Result");
  }
  std::variant<T, Error> state_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  // User-provided, so `return {}` does not zero the object first. A success is one null pointer:
  // every call on the request path returns a Status, and an Error held by value (about 190 bytes,
  // five strings) cost the warm single-token embed a fifth of its time in zeroing, constructing and
  // destroying it.
  Result() noexcept {}
  Result(Error error) : error_(std::make_unique<Error>(std::move(error))) {}  // NOLINT
  Result(const Result& other) : error_(other.error_ ? std::make_unique<Error>(*other.error_) : nullptr) {}
  Result& operator=(const Result& other) {
    if (this != &other) error_ = other.error_ ? std::make_unique<Error>(*other.error_) : nullptr;
    return *this;
  }
  Result(Result&&) noexcept = default;
  Result& operator=(Result&&) noexcept = default;

  bool ok() const noexcept { return error_ == nullptr; }
  explicit operator bool() const noexcept { return ok(); }
  const Error& error() const& { check_error(); return *error_; }
  Error&& error() && { check_error(); return std::move(*error_); }

 private:
  void check_error() const {
    if (ok()) throw BadResultAccess("embedrt: error() of a successful Status");
  }
  std::unique_ptr<Error> error_;  // null: success
};

using Status = Result<void>;

}  // namespace embedrt
