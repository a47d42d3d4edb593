// Which tensors of a checkpoint are the embedding tables, and what metadata the model family
// implies (position offset, output scale, LayerNorm epsilon).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "embedrt/error.hpp"
#include "embedrt/format.hpp"
#include "source_tensor.hpp"

namespace embedrt::import {

struct TableOverrides {
  std::string token, position, segment, norm_weight, norm_bias;  // exact tensor names
  std::optional<double> norm_epsilon;
};

struct ChosenTable {
  Role role;
  const SourceTensor* tensor;
};

struct ModelPlan {
  std::string family;       // "gpt2", ..., or "custom"
  std::string explanation;  // what auto-detection saw, printed by the CLI
  std::vector<ChosenTable> tables;
  std::uint64_t sinusoidal_context = 0;  // > 0: generate a fixed sinusoidal position table
  Metadata metadata;        // family, offsets, scale, epsilon, context (source fields left empty)
};

// `preset` is "auto" or a family name (gpt2, bert, roberta, opt, llama, gemma, t5).
Result<ModelPlan> plan_model(const std::vector<SourceTensor>& tensors, const std::string& preset,
                             const TableOverrides& overrides);

// Adds a generated sinusoidal position table of `context` rows (the original Transformer's
// sin/cos at 10000^(2i/d)); refused when the plan already has a position table.
Status add_sinusoidal_positions(ModelPlan& plan, std::uint64_t context);

}  // namespace embedrt::import
