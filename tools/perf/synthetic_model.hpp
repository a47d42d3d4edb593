// Benchmark models generated on the spot, of any shape: tables several times the last-level
// cache (Llama-3's 128256 x 4096, Gemma 3's 262144 x 5376) are written when a run needs them and
// never committed. Values are random, in the range of real embeddings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "embedrt/error.hpp"
#include "embedrt/format.hpp"
#include "embedrt/model.hpp"

namespace embedrt::perf {

struct SyntheticSpec {
  std::uint64_t vocab = 0, dim = 0;
  DType dtype = DType::kF32;
  std::uint64_t positions = 0;  // learned position rows (GPT-2: 1024); 0: none
  std::uint64_t segments = 0;   // token type rows (BERT: 2); 0: none
  bool layer_norm = false;      // LayerNorm weight and bias after the sum (BERT)
  double token_scale = 1.0;     // multiplies the token row (Gemma: sqrt(hidden), rounded to the dtype)

  // A second output with its own token table of the same dtype (Gemma 3n's per-layer inputs:
  // 262144 x layers*256, scale 16, ids past its rows read row 0). vocab 0: none.
  struct Extra {
    std::string name = "per_layer_inputs";
    std::uint64_t vocab = 0, dim = 0;
    double token_scale = 1.0;
    std::vector<std::uint64_t> shape;  // of one token's output (product dim); empty: {dim}
    OutOfRangeIds out_of_range = OutOfRangeIds::kRefuse;
  } extra;

  std::string describe() const;  // "50257x768 bf16, 1024 positions"
};

// Gemma 3n's two embedding tables at full size, bf16, with transformers' scales rounded to bf16:
// "e2b" (hidden 2048, 30 layers x 256) or "e4b" (2560, 35 x 256); an error naming the text otherwise.
Status gemma3n_spec(const std::string& variant, SyntheticSpec& spec);

// "50257x768" -> vocab and dim; an error naming the text otherwise.
Status parse_shape(const std::string& text, SyntheticSpec& spec);

// Writes the model to `path` (replacing it), rows filled on every core. No fsync: a scratch file.
Status write_synthetic_model(const std::string& path, const SyntheticSpec& spec);

// Whether an existing model has this spec's tables (a reused --synthetic-file); an error saying
// what differs otherwise.
Status matches(const Model& model, const SyntheticSpec& spec);

}  // namespace embedrt::perf
