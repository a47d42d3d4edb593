// What `embed` and `pool` share: ids from the command line, a computation into an output of any
// dtype read back as floats, and the vectors printed as text or JSON.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "embedrt/embedder.hpp"
#include "embedrt/error.hpp"
#include "embedrt/model.hpp"

namespace embedrt::cli {

// "3,1,4,1" -> {3, 1, 4, 1}. Negative values parse, so the library can name them.
Result<std::vector<std::int64_t>> parse_ids(const std::string& text, const char* option);
// "0,3,5" -> {0, 3, 5}: non-negative integers (offsets).
Result<std::vector<std::uint64_t>> parse_counts(const std::string& text, const char* option);
// "0.5,1,2" -> floats.
Result<std::vector<float>> parse_floats(const std::string& text, const char* option);

// The index of the output named by --output (empty: the primary one), or an error listing the outputs.
Result<std::size_t> output_index(const Model& model, const std::string& name);

// An Embedder for the model, on the ISA named by --isa (empty: the best this CPU runs).
Result<Embedder> embedder_for(const Model& model, const std::string& isa);

// Runs `compute` into a buffer of `count` elements of `dtype` and returns them as floats (16-bit
// outputs decoded exactly).
Result<std::vector<float>> compute_as_floats(OutputDType dtype, std::uint64_t count,
                                             const std::function<Status(OutputSpan)>& compute);

// Prints the vectors: "shape [..]" then one line per vector, labelled with its index over
// `leading` (e.g. {B, L} or {bags}); or {"shape": [...], "data": [...]}. The full shape is
// `leading` followed by `inner`.
void write_vectors(const std::vector<float>& values, std::span<const std::uint64_t> leading,
                   std::span<const std::uint64_t> inner, bool json);

}  // namespace embedrt::cli
