// Library errors as Python exceptions. Every embedrt::Error, and every argument the binding
// refuses, is raised as the class embedrt/_errors.py maps its code to (InvalidArgumentError is a
// ValueError, NotFoundError a FileNotFoundError, ...), with the library's message and its
// context (code, field, file, tensor, offset, sequence, position) as attributes.
#pragma once

#include <nanobind/nanobind.h>

#include <exception>
#include <string>
#include <string_view>

#include "embedrt/error.hpp"

namespace embedrt::python {

namespace nb = nanobind;

// Carries an embedrt::Error out of a bound function; the translator installed by
// register_errors() raises it as its Python class.
class RaisedError : public std::exception {
 public:
  explicit RaisedError(Error error) : error_(std::move(error)) {}
  const Error& error() const noexcept { return error_; }
  const char* what() const noexcept override { return error_.message().c_str(); }

 private:
  Error error_;
};

// A library error. A request error names the Python argument at fault: the API field
// `position_ids` is the argument `positions`, and the message starts with "positions: ".
[[noreturn]] void raise_error(Error error);

// An argument refused by the binding: InvalidArgumentError("argument: message").
[[noreturn]] void raise_invalid(std::string_view argument, const std::string& message);

// Imports embedrt._errors and installs the exception translator.
void register_errors(nb::module_& module);

}  // namespace embedrt::python
