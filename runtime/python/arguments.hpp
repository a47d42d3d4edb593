// Reading the arguments of Model.embed from Python objects, under the GIL and before the call
// releases it: integer arrays (ids, positions, segments, starts), output dtypes, and the output
// array (the caller's `out=`, checked, or a new one).
//
// Integer arrays are copied into memory the call owns (8 bytes a token, small beside the output
// rows). That copy is what makes releasing the GIL safe: another Python thread writing into the
// caller's array mid-call cannot turn an id that was validated into one past the table. Outputs
// are never copied: rows are written into the caller's buffer, which must be C-contiguous.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "embedrt/embedder.hpp"

namespace embedrt::python {

namespace nb = nanobind;

// An integer array argument as the call's own int64 copy, in C order.
struct IntArray {
  int ndim = 0;                      // 0 for a scalar
  std::int64_t shape[2] = {0, 0};
  std::vector<std::int64_t> values;  // shape[0] * shape[1] (or one, or shape[0]) values
};

// Reads int32 or int64 values with at most 2 dimensions from anything with the buffer protocol
// or DLPack (numpy, torch, jax, ...) on the CPU, from a list or tuple, or from a Python int.
// Any strides are accepted. Anything else is an InvalidArgumentError naming `argument`.
IntArray read_int_array(nb::handle object, std::string_view argument);

// Floats (weights) with at most 2 dimensions, read through numpy.asarray(object, float32): any
// array, list or number numpy can read as float32 values; copied into the call's own memory.
struct FloatArray {
  int ndim = 0;
  std::int64_t shape[2] = {0, 0};
  std::vector<float> values;
};
FloatArray read_float_array(nb::handle object, std::string_view argument);

// What `dtype=` asked for: an output dtype, and whether a new output is a torch tensor.
struct DTypeRequest {
  OutputDType dtype = OutputDType::kF32;
  bool torch = false;
};

// None: nothing asked. Otherwise "f32"/"float32", "bf16"/"bfloat16", "f16"/"float16", a numpy
// dtype (ml_dtypes.bfloat16 included), or a torch dtype (then new outputs are torch tensors).
std::optional<DTypeRequest> read_dtype(nb::handle object);

// The buffer the rows are written into, and the object handed back to the caller.
struct OutputArray {
  nb::object result;                             // returned by embed()
  nb::ndarray<nb::device::cpu> view;             // keeps an imported DLPack tensor alive
  void* data = nullptr;
  std::size_t elements = 0;
  OutputDType dtype = OutputDType::kF32;
};

// `out=`: a writable, C-contiguous CPU array of `shape` whose dtype is float32, bfloat16
// (torch.bfloat16 or ml_dtypes.bfloat16) or float16, and `requested` if that is given.
OutputArray checked_output(nb::handle out, std::span<const std::int64_t> shape,
                           const std::optional<DTypeRequest>& requested);

// A new output of `shape` that owns its memory: a numpy array (64-byte aligned, so the kernel's
// streaming stores never share a cache line with ordinary ones) or a torch tensor.
OutputArray new_output(std::span<const std::int64_t> shape, DTypeRequest dtype);

// os.fspath(object) as bytes for the library ("path", "src", "dst"); a NUL byte is refused.
std::string read_path(nb::handle object, std::string_view argument);

}  // namespace embedrt::python
