#include "arguments.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "errors.hpp"

namespace embedrt::python {
namespace {

namespace dlpack = nb::dlpack;

// Python objects the hot path needs, looked up on first use and kept for the life of the
// process (never released: static destructors may run after the interpreter is gone). Not C++
// function-local statics: an import runs Python code, which may hand the GIL to another thread,
// and that thread would then wait on the C++ initialization guard while holding the GIL: a
// deadlock. Instead each slot is filled under the GIL; two threads may both look it up, and the
// second result is dropped.
template <typename Make>
PyObject* cached(PyObject*& slot, Make make) {
  if (slot == nullptr) {
    nb::object value = make();
    if (slot == nullptr) slot = value.release().ptr();
  }
  return slot;
}


PyObject* numpy_asarray() {
  static PyObject* slot = nullptr;
  return cached(slot, [] { return nb::module_::import_("numpy").attr("asarray"); });
}

PyObject* numpy_dtype() {
  static PyObject* slot = nullptr;
  return cached(slot, [] { return nb::module_::import_("numpy").attr("dtype"); });
}

PyObject* numpy_uint16() {
  static PyObject* slot = nullptr;
  return cached(slot, [] { return nb::module_::import_("numpy").attr("uint16"); });
}

// ml_dtypes.bfloat16's numpy dtype, imported on first use (only bf16 outputs need it).
PyObject* numpy_bfloat16() {
  static PyObject* slot = nullptr;
  return cached(slot, [] { return nb::borrow(numpy_dtype())(nb::module_::import_("ml_dtypes").attr("bfloat16")); });
}

std::string class_name(nb::handle object) { return Py_TYPE(object.ptr())->tp_name; }

std::string dtype_text(const dlpack::dtype& t) {
  const char* kind = "?";
  switch (static_cast<dlpack::dtype_code>(t.code)) {
    case dlpack::dtype_code::Int: kind = "int"; break;
    case dlpack::dtype_code::UInt: kind = "uint"; break;
    case dlpack::dtype_code::Float: kind = "float"; break;
    case dlpack::dtype_code::Bfloat: kind = "bfloat"; break;
    case dlpack::dtype_code::Complex: kind = "complex"; break;
    case dlpack::dtype_code::Bool: return "bool";
    default: return "code " + std::to_string(t.code) + " (" + std::to_string(t.bits) + " bits)";
  }
  std::string text = kind + std::to_string(t.bits);
  if (t.lanes != 1) text += "x" + std::to_string(t.lanes);
  return text;
}

std::string shape_text(std::span<const std::int64_t> shape) {
  std::string text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + (shape.size() == 1 ? ",)" : ")");
}

std::string python_text(nb::handle object) {
  nb::str text = nb::str(object);
  return text.c_str();
}

// numpy arrays of ml_dtypes.bfloat16 are exported neither through the buffer protocol nor
// through DLPack; they are read as uint16 and known to be bf16. Only asked after the ordinary
// import failed, so other outputs pay nothing for it.
bool is_numpy_bfloat16_array(nb::handle object) {
  if (std::strcmp(Py_TYPE(object.ptr())->tp_name, "numpy.ndarray") != 0) return false;
  nb::object dtype = nb::getattr(object, "dtype", nb::none());
  return dtype.ptr() == numpy_bfloat16();
}

// torch tensors, found by their C base class (torch is never imported for this).
bool is_torch_tensor(nb::handle object) {
  PyObject* mro = Py_TYPE(object.ptr())->tp_mro;
  if (mro == nullptr) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i) {
    if (std::strcmp(reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i))->tp_name, "torch._C.TensorBase") == 0) return true;
  }
  return false;
}

// A numpy view of a CPU torch tensor's memory (Tensor.numpy(): no copy), or an invalid object when
// torch refuses (a CUDA tensor, one that requires grad, a dtype numpy lacks). torch's __dlpack__
// costs several microseconds a call, .numpy() a fraction of that: this is the decode path of a
// torch-driven engine.
nb::object torch_numpy_view(nb::handle tensor) {
  PyObject* view = PyObject_CallMethod(tensor.ptr(), "numpy", nullptr);
  if (view == nullptr) PyErr_Clear();
  return nb::steal(view);
}

// torch.Tensor itself (not a subclass, whose methods could say anything) on the CPU, contiguous,
// without a negative bit: its dtype, shape and data pointer from torch's own accessors, about half
// the cost of Tensor.numpy() and a fifth of __dlpack__ (bench/python_bench.py, decode with torch).
struct PlainTensor {
  std::byte* data = nullptr;
  dlpack::dtype dtype;
  int ndim = 0;
  std::int64_t shape[3] = {0, 0, 0};
};

PyObject* interned(const char* name) { return PyUnicode_InternFromString(name); }

std::optional<PlainTensor> plain_torch_tensor(nb::handle object) {
  static constexpr const char* kNames[5] = {"int32", "int64", "float32", "float16", "bfloat16"};
  static constexpr dlpack::dtype kDTypes[5] = {{0, 32, 1}, {0, 64, 1}, {2, 32, 1}, {2, 16, 1}, {4, 16, 1}};
  // Interning runs no Python code, so these may be C++ statics.
  static PyObject* const names[] = {interned("dtype"), interned("is_cpu"), interned("is_contiguous"),
                                    interned("is_neg"), interned("shape"), interned("data_ptr")};
  if (!is_torch_tensor(object)) return std::nullopt;  // torch is imported: a tensor exists
  static PyObject* tensor_type = nullptr;
  static PyObject* dtypes[5] = {};
  if (cached(tensor_type, [] { return nb::module_::import_("torch").attr("Tensor"); }) !=
      reinterpret_cast<PyObject*>(Py_TYPE(object.ptr()))) {
    return std::nullopt;
  }
  for (int i = 0; i < 5; ++i) cached(dtypes[i], [i] { return nb::module_::import_("torch").attr(kNames[i]); });
  PlainTensor t;
  nb::object dtype = nb::steal(PyObject_GetAttr(object.ptr(), names[0]));
  int which = 0;
  while (which < 5 && dtype.ptr() != dtypes[which]) ++which;
  if (which == 5) {
    PyErr_Clear();
    return std::nullopt;
  }
  t.dtype = kDTypes[which];
  const auto is_true = [](PyObject* value) {
    const bool yes = value == Py_True;
    Py_XDECREF(value);
    return yes;
  };
  if (!is_true(PyObject_GetAttr(object.ptr(), names[1])) ||
      !is_true(PyObject_CallMethodNoArgs(object.ptr(), names[2])) ||
      is_true(PyObject_CallMethodNoArgs(object.ptr(), names[3])) || PyErr_Occurred() != nullptr) {
    PyErr_Clear();
    return std::nullopt;
  }
  nb::object shape = nb::steal(PyObject_GetAttr(object.ptr(), names[4]));
  if (!shape.is_valid() || !PyTuple_Check(shape.ptr()) || PyTuple_GET_SIZE(shape.ptr()) > 3) {
    PyErr_Clear();
    return std::nullopt;
  }
  t.ndim = static_cast<int>(PyTuple_GET_SIZE(shape.ptr()));
  for (int i = 0; i < t.ndim; ++i) t.shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape.ptr(), i));
  nb::object pointer = nb::steal(PyObject_CallMethodNoArgs(object.ptr(), names[5]));
  if (!pointer.is_valid() || PyErr_Occurred() != nullptr) {
    PyErr_Clear();
    return std::nullopt;
  }
  t.data = static_cast<std::byte*>(PyLong_AsVoidPtr(pointer.ptr()));
  return t;
}

std::int64_t load(const std::byte* p, int bits) {
  if (bits == 64) {
    std::int64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  std::int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Elements and bytes of an output of this shape and dtype, refused when they overflow.
std::size_t output_elements(std::span<const std::int64_t> shape) {
  std::size_t n = 1;
  for (std::int64_t d : shape) {
    if (__builtin_mul_overflow(n, static_cast<std::size_t>(d), &n)) {
      raise_invalid("ids", "an output of shape " + shape_text(shape) + " does not fit in memory");
    }
  }
  return n;
}

}  // namespace

FloatArray read_float_array(nb::handle object, std::string_view argument) {
  nb::object as_float;
  try {
    as_float = nb::borrow(numpy_asarray())(object, "float32");
  } catch (nb::python_error& error) {
    raise_invalid(argument, "cannot be read as float32 values: " + python_text(error.value()));
  }
  nb::ndarray<const float, nb::ro, nb::device::cpu> array;
  if (!nb::try_cast(nb::borrow(numpy_asarray())(as_float.attr("copy")("C")), array, false)) {
    raise_invalid(argument, "cannot be read as float32 values");
  }
  FloatArray result;
  result.ndim = static_cast<int>(array.ndim());
  if (result.ndim > 2) raise_invalid(argument, std::to_string(result.ndim) + " dimensions; expected at most 2");
  std::size_t count = 1;
  for (int i = 0; i < result.ndim; ++i) {
    result.shape[i] = static_cast<std::int64_t>(array.shape(static_cast<std::size_t>(i)));
    count *= array.shape(static_cast<std::size_t>(i));
  }
  result.values.assign(array.data(), array.data() + count);
  return result;
}

IntArray read_int_array(nb::handle object, std::string_view argument) {
  IntArray result;
  if (PyLong_Check(object.ptr()) && !PyBool_Check(object.ptr())) {
    int overflow = 0;
    const long long value = PyLong_AsLongLongAndOverflow(object.ptr(), &overflow);
    if (overflow != 0) raise_invalid(argument, python_text(object) + " is past the range of int64");
    result.values.push_back(value);
    return result;
  }
  if (const std::optional<PlainTensor> t = plain_torch_tensor(object); t && t->ndim <= 2 &&
      t->dtype.code == 0 && (t->dtype.bits == 32 || t->dtype.bits == 64)) {
    result.ndim = t->ndim;
    std::size_t count = 1;
    for (int i = 0; i < t->ndim; ++i) {
      result.shape[i] = t->shape[i];
      count *= static_cast<std::size_t>(t->shape[i]);  // the tensor exists: no overflow
    }
    result.values.resize(count);
    if (t->dtype.bits == 64 && count > 0) {
      std::memcpy(result.values.data(), t->data, count * sizeof(std::int64_t));
    } else {
      for (std::size_t i = 0; i < count; ++i) result.values[i] = load(t->data + i * 4, 32);
    }
    return result;
  }
  if (is_torch_tensor(object)) {
    // (A subclass whose numpy() returns a tensor again takes the DLPack path: no recursion.)
    nb::object view = torch_numpy_view(object);
    if (view.is_valid() && !is_torch_tensor(view)) return read_int_array(view, argument);
  }
  nb::ndarray<nb::ro, nb::device::cpu> array;
  nb::object converted;
  bool from_list = false;
  if (!nb::try_cast(object, array, false)) {
    if (!PyList_Check(object.ptr()) && !PyTuple_Check(object.ptr())) {
      raise_invalid(argument, "expected int32 or int64 values in a CPU array (buffer protocol or DLPack), a list "
                              "or an int; got " + class_name(object));
    }
    PyObject* made = PyObject_CallOneArg(numpy_asarray(), object.ptr());
    if (made == nullptr) {
      nb::python_error error;
      raise_invalid(argument, "cannot be read as an array: " + python_text(error.value()));
    }
    converted = nb::steal(made);
    if (!nb::try_cast(converted, array, false)) {
      raise_invalid(argument, "holds values that are not integers (numpy reads it as " +
                                  python_text(converted.attr("dtype")) + ")");
    }
    from_list = true;
  }
  const int ndim = static_cast<int>(array.ndim());
  if (ndim > 2) raise_invalid(argument, std::to_string(ndim) + " dimensions; expected at most 2");
  const dlpack::dtype dt = array.dtype();
  std::size_t count = 1;
  for (int i = 0; i < ndim; ++i) {
    result.shape[i] = static_cast<std::int64_t>(array.shape(static_cast<std::size_t>(i)));
    if (__builtin_mul_overflow(count, array.shape(static_cast<std::size_t>(i)), &count)) {
      raise_invalid(argument, "has more values than memory can hold");
    }
  }
  result.ndim = ndim;
  if (from_list && count == 0) return result;  // numpy reads [] as float64; it holds no value
  const bool integer = dt.code == static_cast<std::uint8_t>(dlpack::dtype_code::Int) && dt.lanes == 1 &&
                       (dt.bits == 32 || dt.bits == 64);
  if (!integer) raise_invalid(argument, "dtype " + dtype_text(dt) + "; expected int32 or int64");

  result.values.resize(count);
  if (count == 0) return result;
  // Strides in elements, any sign; a 1-D or 0-D array is a single row.
  const std::int64_t rows = ndim == 2 ? result.shape[0] : 1;
  const std::int64_t cols = ndim == 0 ? 1 : result.shape[ndim - 1];
  const std::int64_t row_stride = ndim == 2 ? array.stride(0) : 0;
  const std::int64_t col_stride = ndim == 0 ? 0 : array.stride(static_cast<std::size_t>(ndim - 1));
  const auto* base = static_cast<const std::byte*>(array.data());
  const std::int64_t size = dt.bits / 8;
  std::int64_t* out = result.values.data();
  if (dt.bits == 64 && col_stride == 1 && (rows == 1 || row_stride == cols)) {
    std::memcpy(out, base, count * sizeof(std::int64_t));
    return result;
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      *out++ = load(base + (r * row_stride + c * col_stride) * size, dt.bits);
    }
  }
  return result;
}

std::optional<DTypeRequest> read_dtype(nb::handle object) {
  if (object.is_none()) return std::nullopt;
  std::string name;
  DTypeRequest request;
  if (nb::isinstance<nb::str>(object)) {
    name = nb::str(object).c_str();
  } else if (std::strcmp(Py_TYPE(object.ptr())->tp_name, "torch.dtype") == 0) {
    name = python_text(object);  // "torch.float32"
    if (name.rfind("torch.", 0) == 0) name.erase(0, 6);
    request.torch = true;
  } else {
    PyObject* dtype = PyObject_CallOneArg(numpy_dtype(), object.ptr());
    if (dtype == nullptr) {
      PyErr_Clear();
      raise_invalid("dtype", "expected float32, bfloat16 or float16 (a name, a numpy dtype or a torch dtype); got " +
                                 python_text(object));
    }
    name = python_text(nb::steal(dtype).attr("name"));
  }
  if (name == "f32" || name == "float32") {
    request.dtype = OutputDType::kF32;
  } else if (name == "bf16" || name == "bfloat16") {
    request.dtype = OutputDType::kBF16;
  } else if (name == "f16" || name == "float16") {
    request.dtype = OutputDType::kF16;
  } else {
    raise_invalid("dtype", "'" + name + "'; expected float32, bfloat16 or float16");
  }
  return request;
}

OutputArray checked_output(nb::handle out, std::span<const std::int64_t> shape,
                           const std::optional<DTypeRequest>& requested) {
  OutputArray result;
  result.result = nb::borrow(out);
  nb::object source = result.result;
  bool bfloat16_bits = false;
  if (is_torch_tensor(out)) {
    // torch's own out= refuses these too; its DLPack export would hand over the storage anyway.
    if (nb::getattr(out, "requires_grad").is(Py_True)) {
      raise_invalid("out", "requires grad: embedrt writes it outside autograd (pass out.detach())");
    }
    if (const std::optional<PlainTensor> t = plain_torch_tensor(out); t && t->dtype.code != 0) {
      result.dtype = t->dtype.code == 4 ? OutputDType::kBF16 : t->dtype.bits == 32 ? OutputDType::kF32 : OutputDType::kF16;
      if (requested && requested->dtype != result.dtype) {
        raise_invalid("dtype", std::string(output_dtype_name(requested->dtype)) + " but out is " +
                                   std::string(output_dtype_name(result.dtype)));
      }
      if (!std::equal(t->shape, t->shape + t->ndim, shape.begin(), shape.end())) {
        raise_invalid("out", "shape " + shape_text({t->shape, static_cast<std::size_t>(t->ndim)}) + "; expected " +
                                 shape_text(shape));
      }
      result.data = t->data;
      result.elements = output_elements(shape);
      return result;
    }
    if (nb::object view = torch_numpy_view(out); view.is_valid()) {
      source = view;
    } else if (python_text(out.attr("dtype")) == "torch.bfloat16") {
      nb::object int16 = nb::module_::import_("torch").attr("int16");
      if (nb::object bits = torch_numpy_view(out.attr("view")(int16)); bits.is_valid()) {
        source = bits;
        bfloat16_bits = true;  // int16 bits known to be bf16
      }
    }
  }
  bool imported = nb::try_cast(source, result.view, false);
  if (!imported && is_numpy_bfloat16_array(out)) {
    bfloat16_bits = true;
    source = out.attr("view")(nb::handle(numpy_uint16()));
    imported = nb::try_cast(source, result.view, false);
  }
  if (!imported) {
    nb::ndarray<nb::ro, nb::device::cpu> readonly;
    if (nb::try_cast(source, readonly, false)) raise_invalid("out", "is read-only");
    raise_invalid("out", "expected a writable CPU array (buffer protocol or DLPack); got " + class_name(out));
  }
  const dlpack::dtype dt = result.view.dtype();
  const auto code = static_cast<dlpack::dtype_code>(dt.code);
  if (dt.lanes == 1 && code == dlpack::dtype_code::Float && dt.bits == 32) {
    result.dtype = OutputDType::kF32;
  } else if (dt.lanes == 1 && code == dlpack::dtype_code::Float && dt.bits == 16) {
    result.dtype = OutputDType::kF16;
  } else if (dt.lanes == 1 && dt.bits == 16 &&
             (code == dlpack::dtype_code::Bfloat ||
              (bfloat16_bits && (code == dlpack::dtype_code::UInt || code == dlpack::dtype_code::Int)))) {
    result.dtype = OutputDType::kBF16;
  } else {
    raise_invalid("out", "dtype " + dtype_text(dt) + "; expected float32, bfloat16 or float16");
  }
  if (requested && requested->dtype != result.dtype) {
    raise_invalid("dtype", std::string(output_dtype_name(requested->dtype)) + " but out is " +
                               std::string(output_dtype_name(result.dtype)));
  }
  std::vector<std::int64_t> actual(result.view.ndim());
  for (std::size_t i = 0; i < actual.size(); ++i) actual[i] = static_cast<std::int64_t>(result.view.shape(i));
  if (!std::equal(actual.begin(), actual.end(), shape.begin(), shape.end())) {
    raise_invalid("out", "shape " + shape_text(actual) + "; expected " + shape_text(shape));
  }
  // C order, ignoring dimensions of one element (whose stride means nothing); an empty array
  // has nothing to write.
  std::int64_t expected_stride = 1;
  const bool empty = std::find(actual.begin(), actual.end(), 0) != actual.end();
  for (std::size_t i = actual.size(); !empty && i-- > 0;) {
    if (actual[i] != 1 && result.view.stride(i) != expected_stride) {
      raise_invalid("out", "is not C-contiguous: embedrt writes whole rows in place, so it cannot write through "
                           "strides (pass a contiguous array)");
    }
    expected_stride *= actual[i];
  }
  result.data = result.view.data();
  result.elements = output_elements(shape);
  return result;
}

OutputArray new_output(std::span<const std::int64_t> shape, DTypeRequest request) {
  OutputArray result;
  result.dtype = request.dtype;
  result.elements = output_elements(shape);
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(result.elements, output_element_bytes(request.dtype), &bytes) || bytes > (SIZE_MAX >> 1)) {
    raise_invalid("ids", "an output of shape " + shape_text(shape) + " does not fit in memory");
  }
  // 64-byte aligned memory owned by a capsule that the numpy array keeps as its base; a torch
  // result wraps that array (torch.from_numpy costs a third of torch.empty).
  void* memory = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64 * (bytes == 0));
  if (memory == nullptr) throw std::bad_alloc();
  nb::capsule owner(memory, [](void* p) noexcept { std::free(p); });
  std::vector<std::size_t> dims(shape.size());  // [B, L] or [bags], then one token's shape
  for (std::size_t i = 0; i < shape.size(); ++i) dims[i] = static_cast<std::size_t>(shape[i]);
  const dlpack::dtype dt = request.dtype == OutputDType::kF32
                               ? dlpack::dtype{static_cast<std::uint8_t>(dlpack::dtype_code::Float), 32, 1}
                           : request.dtype == OutputDType::kF16
                               ? dlpack::dtype{static_cast<std::uint8_t>(dlpack::dtype_code::Float), 16, 1}
                               : dlpack::dtype{static_cast<std::uint8_t>(dlpack::dtype_code::UInt), 16, 1};
  nb::ndarray<nb::numpy> array(memory, shape.size(), dims.data(), owner, nullptr, dt);
  result.result = array.cast();
  if (request.torch) {
    nb::module_ torch = nb::module_::import_("torch");
    result.result = torch.attr("from_numpy")(result.result);
    if (request.dtype == OutputDType::kBF16) result.result = result.result.attr("view")(torch.attr("bfloat16"));
  } else if (request.dtype == OutputDType::kBF16) {
    result.result = result.result.attr("view")(nb::handle(numpy_bfloat16()));
  }
  result.data = memory;
  return result;
}

std::string read_path(nb::handle object, std::string_view argument) {
  PyObject* path = PyOS_FSPath(object.ptr());
  if (path == nullptr) {
    PyErr_Clear();
    raise_invalid(argument, "expected a path (str, bytes or os.PathLike); got " + class_name(object));
  }
  nb::object owned = nb::steal(path);
  nb::object bytes = PyUnicode_Check(path) ? nb::steal(PyUnicode_EncodeFSDefault(path)) : owned;
  if (!bytes.is_valid()) {
    nb::python_error error;
    raise_invalid(argument, "cannot be encoded as a file name: " + python_text(error.value()));
  }
  std::string text(PyBytes_AsString(bytes.ptr()), static_cast<std::size_t>(PyBytes_Size(bytes.ptr())));
  if (text.find('\0') != std::string::npos) raise_invalid(argument, "contains a NUL byte");
  if (text.empty()) raise_invalid(argument, "is empty");
  return text;
}

}  // namespace embedrt::python
