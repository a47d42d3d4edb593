#include "embedrt/import.hpp"

namespace embedrt::import {

std::string_view source_dtype_name(SourceDType dtype) noexcept {
  switch (dtype) {
    case SourceDType::kF64: return "float64";
    case SourceDType::kF32: return "float32";
    case SourceDType::kF16: return "float16";
    case SourceDType::kBF16: return "bfloat16";
    case SourceDType::kI64: return "int64";
    case SourceDType::kI32: return "int32";
    case SourceDType::kI16: return "int16";
    case SourceDType::kI8: return "int8";
    case SourceDType::kU8: return "uint8";
    case SourceDType::kU16: return "uint16";
    case SourceDType::kU32: return "uint32";
    case SourceDType::kU64: return "uint64";
    case SourceDType::kBool: return "bool";
  }
  return "?";
}

std::size_t source_dtype_size(SourceDType dtype) noexcept {
  switch (dtype) {
    case SourceDType::kF64: case SourceDType::kI64: case SourceDType::kU64: return 8;
    case SourceDType::kF32: case SourceDType::kI32: case SourceDType::kU32: return 4;
    case SourceDType::kF16: case SourceDType::kBF16: case SourceDType::kI16: case SourceDType::kU16: return 2;
    case SourceDType::kI8: case SourceDType::kU8: case SourceDType::kBool: return 1;
  }
  return 1;
}

bool is_floating(SourceDType dtype) noexcept {
  return dtype == SourceDType::kF64 || dtype == SourceDType::kF32 || dtype == SourceDType::kF16 ||
         dtype == SourceDType::kBF16;
}

std::string shape_string(const std::vector<std::int64_t>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::uint64_t SourceTensor::numel() const noexcept {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

Status validate_view(const SourceTensor& t) {
  const auto fail = [&t](const std::string& what) {
    return Error(ErrorCode::kMalformed, t.origin + ": tensor '" + t.name + "': " + what);
  };
  if (t.shape.size() != t.strides.size()) {
    return fail("shape " + shape_string(t.shape) + " and strides " + shape_string(t.strides) + " differ in rank");
  }
  if (t.shape.size() > 64) return fail("rank " + std::to_string(t.shape.size()) + " is oversized");
  if (t.storage_offset < 0) return fail("negative storage offset " + std::to_string(t.storage_offset));
  std::uint64_t numel = 1, last = static_cast<std::uint64_t>(t.storage_offset);
  bool empty = false;
  for (std::size_t i = 0; i < t.shape.size(); ++i) {
    if (t.shape[i] < 0 || t.strides[i] < 0) {
      return fail("negative size or stride in shape " + shape_string(t.shape) + ", strides " + shape_string(t.strides));
    }
    if (__builtin_mul_overflow(numel, static_cast<std::uint64_t>(t.shape[i]), &numel)) {
      return fail("element count of shape " + shape_string(t.shape) + " overflows");
    }
    if (t.shape[i] == 0) {
      empty = true;
      continue;
    }
    std::uint64_t reach = 0;
    if (__builtin_mul_overflow(static_cast<std::uint64_t>(t.shape[i] - 1), static_cast<std::uint64_t>(t.strides[i]), &reach) ||
        __builtin_add_overflow(last, reach, &last)) {
      return fail("extent of shape " + shape_string(t.shape) + " with strides " + shape_string(t.strides) + " overflows");
    }
  }
  const std::uint64_t element = source_dtype_size(t.dtype);
  const std::uint64_t storage_elements = t.storage.size() / element;
  if (!empty && last >= storage_elements) {
    return fail("view (offset " + std::to_string(t.storage_offset) + ", shape " + shape_string(t.shape) +
                ", strides " + shape_string(t.strides) + ") reaches element " + std::to_string(last) +
                ", past its storage of " + std::to_string(storage_elements) + " elements");
  }
  return {};
}

}  // namespace embedrt::import
