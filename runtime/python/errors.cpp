#include "errors.hpp"

#include <array>
#include <utility>

namespace embedrt::python {
namespace {

// embedrt._errors._make(code, message, field, file, tensor, offset, sequence, position): builds
// the exception instance. Kept for the life of the process (never released: the interpreter may
// be finalizing when static destructors run).
PyObject* make_exception = nullptr;

// The request fields of EmbedRequest (ErrorContext::field) and the Python arguments that carry them.
constexpr std::array<std::pair<std::string_view, std::string_view>, 7> kArgumentOfField{{
    {"ids", "ids"},
    {"sequence_offsets", "ids"},
    {"position_ids", "positions"},
    {"start_positions", "starts"},
    {"start", "starts"},
    {"segment_ids", "segments"},
    {"output", "out"},
}};

nb::object optional_int(const std::optional<std::uint64_t>& value) {
  return value ? nb::object(nb::int_(*value)) : nb::object(nb::none());
}

nb::object optional_str(const std::string& text) {
  if (text.empty()) return nb::none();
  // Names from hostile files are valid UTF-8 by the time they reach an error, but a path need
  // not be: never let the error itself fail to decode.
  return nb::steal(PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace"));
}

void set_python_error(const Error& error) {
  const std::string& message = error.message();
  const ErrorContext& c = error.context();
  nb::object text = nb::steal(PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "replace"));
  PyObject* args[] = {nb::str(error_code_name(error.code())).release().ptr(), text.release().ptr(),
                      optional_str(c.field).release().ptr(), optional_str(c.file).release().ptr(),
                      optional_str(c.tensor).release().ptr(), optional_int(c.offset).release().ptr(),
                      optional_int(c.sequence).release().ptr(), optional_int(c.position).release().ptr()};
  PyObject* instance = PyObject_Vectorcall(make_exception, args, std::size(args), nullptr);
  for (PyObject* arg : args) Py_DECREF(arg);
  if (instance == nullptr) return;  // _make raised: that exception stands
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(instance)), instance);
  Py_DECREF(instance);
}

}  // namespace

void raise_error(Error error) {
  const ErrorContext& context = error.context();
  for (const auto& [field, argument] : kArgumentOfField) {
    if (context.field == field) {
      ErrorContext renamed = context;
      renamed.field = argument;
      throw RaisedError(Error(error.code(), std::string(argument) + ": " + error.message(), std::move(renamed)));
    }
  }
  throw RaisedError(std::move(error));
}

void raise_invalid(std::string_view argument, const std::string& message) {
  throw RaisedError(Error(ErrorCode::kInvalidArgument, std::string(argument) + ": " + message,
                          {.field = std::string(argument)}));
}

void register_errors(nb::module_& module) {
  nb::module_ errors = nb::module_::import_("embedrt._errors");
  make_exception = nb::object(errors.attr("_make")).release().ptr();
  module.attr("_errors") = errors;
  nb::register_exception_translator([](const std::exception_ptr& raised, void*) {
    try {
      std::rethrow_exception(raised);
    } catch (const RaisedError& e) {
      set_python_error(e.error());
    }
  });
}

}  // namespace embedrt::python
