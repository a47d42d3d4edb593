// A tensor found in a checkpoint: a strided view of a storage that lives in a mapped input file.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "embedrt/error.hpp"

namespace embedrt::import {

enum class SourceDType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kU16, kU32, kU64, kBool };

std::string_view source_dtype_name(SourceDType dtype) noexcept;  // torch names: "float32", ...
std::size_t source_dtype_size(SourceDType dtype) noexcept;
bool is_floating(SourceDType dtype) noexcept;

struct SourceTensor {
  std::string name;
  SourceDType dtype = SourceDType::kF32;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // in elements
  std::int64_t storage_offset = 0;    // in elements
  std::span<const std::byte> storage;  // the whole storage the view reads from
  std::string origin;                  // file and record, for messages

  std::uint64_t numel() const noexcept;  // valid after validate_view()
};

// Checks that sizes, strides and offset are non-negative, that no product overflows, and that the
// furthest element the view can reach lies inside its storage.
Status validate_view(const SourceTensor& tensor);

std::string shape_string(const std::vector<std::int64_t>& dims);  // "[50257, 768]"

}  // namespace embedrt::import
