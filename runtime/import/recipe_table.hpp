// The model families embedrt converts, as data: one recipe per family says where its tables are,
// how positions are counted, how the token row is scaled, which norm follows, and which
// config.json keys feed each number. Adding a family is adding a recipe here and a fixture in
// tests/hf/ (see tests/hf/README.md for the transformers code each recipe reproduces).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <string>
#include <vector>

#include "embedrt/import.hpp"

namespace embedrt::import {

enum class PositionRule {
  kNone,          // no absolute position table (rotary, ALiBi, relative)
  kSequential,    // row start + t + offset
  kPaddingAware,  // RoBERTa's create_position_ids_from_input_ids: pads take row pad_token_id,
                  // other tokens pad_token_id + 1 + start + (non-pad tokens before them)
};

enum class ScaleRule {
  kNone,
  kSqrtWidthInTableDType,  // Gemma: embed_scale = sqrt(hidden_size) cast to the weights' dtype
  kSqrtWidthInF32,         // BART/mBART: a Python float sqrt(d_model) multiplies the weights
};

using Names = std::vector<std::string_view>;  // tensor-name suffixes, matched at a '.' boundary

// An output after the primary one (FORMAT.md 1.2), from a table of its own: Gemma 3n's per-layer
// inputs. Its tokens use the primary output's ids.
struct ExtraOutput {
  std::string_view name;               // the output's name in the file
  Names token;                         // its table, in order of preference
  ScaleRule scale = ScaleRule::kNone;  // sqrt of `scale_width_key`'s value, rounded as the rule says
  std::string_view scale_width_key;
  std::string_view rows_key;           // config key that must equal the table's rows
  Names shape_keys;                    // config keys whose values give one token's output shape
  OutOfRangeIds out_of_range = OutOfRangeIds::kRefuse;
};

struct Recipe {
  std::string_view name;         // preset name and model.family
  Names model_types;             // config.json model_type values this recipe serves
  Names name_prefixes;           // transformers' base_model_prefix: evidence when there is no config
  Names token, position, segment, norm_weight, norm_bias;  // in order of preference
  PositionRule positions = PositionRule::kNone;
  std::uint64_t position_offset = 0;       // kSequential only (OPT, BART: 2)
  ScaleRule scale = ScaleRule::kNone;
  std::string_view scale_if;               // bool config key that enables the scale (default false)
  std::string_view positions_if;           // bool config key that enables positions (default true)
  Names width_keys;                        // config keys giving the token table's width, first present wins
  Names rows_keys = {"max_position_embeddings"};  // config keys giving the position table's rows ...
  std::uint64_t rows_extra = 0;            // ... minus this (OPT, BART keep 2 rows more than they say)
  Names epsilon_keys;                      // config keys giving the norm epsilon
  double default_epsilon = 1e-5;           // when no key is present (or the module hard-codes it)
  std::string_view projection;             // a Linear applied to every token row, folded in (OPT project_in)
  std::uint64_t default_padding_id = 1;    // kPaddingAware without pad_token_id in the config
  std::string_view output_name;            // the primary output's name ("embeddings" when empty)
  // Pooled models (FORMAT.md 1.2): the default pooling, the bool config key that says whether to
  // normalize, the string config key that may name another pooling, and a 1-D per-token weights
  // tensor (optional). `needs_pooling`: the checkpoint cannot say; the user must (`pooling`).
  PoolingMode pooling = PoolingMode::kNone;
  std::string_view normalize_key, pooling_key;
  Names pooling_weights;
  Names id_map;                            // a 1-D integer tensor: id -> row of the token table (2.0)
  bool needs_pooling = false;
  bool detect_by_names = true;             // false: chosen only by config.json's model_type or by name
  std::vector<ExtraOutput> extra_outputs;  // tables beside the token table that give outputs of their own
  // Config keys whose smallest value bounds the primary output's ids: ids at or past it are
  // multimodal soft tokens another tower embeds (Gemma 3n's vision and audio), so the token table
  // is cut there and such ids are refused rather than given a row the model does not use.
  Names text_vocab_keys;
  std::string_view rules;                  // the computation in words, stored as recipe.rules
};

std::span<const Recipe> recipes();

// The token scale of a plan's output (0: the primary one) applied with tables of `dtype`
// (ScaleRounding), and the same in words for the file's provenance ("sqrt(48) = 6.928...,
// applied as 6.9375").
double applied_token_scale(const ModelPlan& plan, std::size_t output, DType dtype);
std::string describe_token_scale(const ModelPlan& plan, std::size_t output, DType dtype);

}  // namespace embedrt::import
