#include "python_json.hpp"

#include <string>

namespace embedrt::python {

namespace nb = nanobind;

nb::object to_python(const nlohmann::ordered_json& value) {
  using Type = nlohmann::ordered_json::value_t;
  switch (value.type()) {
    case Type::boolean: return nb::bool_(value.get<bool>());
    case Type::number_integer: return nb::int_(value.get<std::int64_t>());
    case Type::number_unsigned: return nb::int_(value.get<std::uint64_t>());
    case Type::number_float: return nb::float_(value.get<double>());
    case Type::string: {
      const auto& text = value.get_ref<const std::string&>();
      return nb::steal(PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace"));
    }
    case Type::array: {
      nb::list list;
      for (const auto& item : value) list.append(to_python(item));
      return list;
    }
    case Type::object: {
      nb::dict dict;
      for (const auto& [key, item] : value.items()) {
        nb::object name = nb::steal(PyUnicode_DecodeUTF8(key.data(), static_cast<Py_ssize_t>(key.size()), "replace"));
        dict[name] = to_python(item);
      }
      return dict;
    }
    case Type::null:
    case Type::binary:
    case Type::discarded: break;
  }
  return nb::none();
}

}  // namespace embedrt::python
