#include "recipe_table.hpp"

namespace embedrt::import {
namespace {

using P = PositionRule;
using S = ScaleRule;

// Shared name sets.
const Names kBertToken = {"embeddings.word_embeddings.weight"};
const Names kBertPosition = {"embeddings.position_embeddings.weight"};
const Names kBertSegment = {"embeddings.token_type_embeddings.weight"};
const Names kBertNormWeight = {"embeddings.LayerNorm.weight", "embeddings.LayerNorm.gamma"};
const Names kBertNormBias = {"embeddings.LayerNorm.bias", "embeddings.LayerNorm.beta"};
const Names kDecoderToken = {"embed_tokens.weight"};

// Designated initializers keep each recipe readable as a table row.
const std::vector<Recipe> kRecipes = {
    // ---- decoders with a learned position table ----
    {.name = "gpt2", .model_types = {"gpt2"}, .name_prefixes = {"transformer"},
     .token = {"wte.weight"}, .position = {"wpe.weight"},
     .positions = P::kSequential, .width_keys = {"n_embd", "hidden_size"}, .rows_keys = {"n_positions"},
     .rules = "wte[id] + wpe[start + t]"},
    {.name = "opt", .model_types = {"opt"}, .name_prefixes = {"model"},
     .token = {"decoder.embed_tokens.weight"}, .position = {"decoder.embed_positions.weight"},
     .positions = P::kSequential, .position_offset = 2, .width_keys = {"word_embed_proj_dim", "hidden_size"},
     .rows_extra = 2,
     .projection = "decoder.project_in.weight",
     .rules = "project_in(embed_tokens[id]) + embed_positions[start + t + 2]; project_in (opt-350m) folded into "
              "the token table in f64"},
    {.name = "whisper", .model_types = {"whisper"}, .name_prefixes = {"model"},
     .token = {"decoder.embed_tokens.weight"}, .position = {"decoder.embed_positions.weight"},
     .positions = P::kSequential, .width_keys = {"d_model"}, .rows_keys = {"max_target_positions"},
     .rules = "decoder: embed_tokens[id] + embed_positions[start + t]"},
    {.name = "clip", .model_types = {"clip", "clip_text_model"}, .name_prefixes = {"text_model"},
     // CLIPTextModel saves without a prefix; CLIPModel has a vision tower with its own
     // embeddings.position_embedding, so the text model's prefixed name is preferred.
     .token = {"text_model.embeddings.token_embedding.weight", "embeddings.token_embedding.weight"},
     .position = {"text_model.embeddings.position_embedding.weight", "embeddings.position_embedding.weight"},
     .positions = P::kSequential, .width_keys = {"hidden_size"},
     .rules = "text model: token_embedding[id] + position_embedding[start + t]"},
    // ---- decoders without a position table (rotary or ALiBi) ----
    {.name = "gptj", .model_types = {"gptj"}, .name_prefixes = {"transformer"}, .token = {"wte.weight"},
     .width_keys = {"n_embd"}, .rules = "wte[id]"},
    {.name = "gpt_neox", .model_types = {"gpt_neox"}, .name_prefixes = {"gpt_neox"}, .token = {"embed_in.weight"},
     .width_keys = {"hidden_size"}, .rules = "embed_in[id]"},
    {.name = "falcon", .model_types = {"falcon"}, .name_prefixes = {"transformer"}, .token = {"word_embeddings.weight"},
     .width_keys = {"hidden_size"}, .rules = "word_embeddings[id]"},
    {.name = "mpt", .model_types = {"mpt"}, .name_prefixes = {"transformer"}, .token = {"wte.weight"},
     .width_keys = {"d_model"}, .rules = "wte[id]"},
    {.name = "llama",
     .model_types = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "phi", "phi3"},
     .name_prefixes = {"model"}, .token = kDecoderToken, .width_keys = {"hidden_size"}, .rules = "embed_tokens[id]"},
    {.name = "gemma", .model_types = {"gemma", "gemma2", "gemma3", "gemma3_text"}, .name_prefixes = {"model"},
     .token = kDecoderToken, .scale = S::kSqrtWidthInTableDType, .width_keys = {"hidden_size"},
     .rules = "embed_tokens[id] * sqrt(hidden_size) rounded to the table dtype; the product rounded to the "
              "output dtype"},
    {.name = "gemma3n", .model_types = {"gemma3n", "gemma3n_text"}, .name_prefixes = {"model"},
     // Gemma3nForConditionalGeneration keeps the text model under model.language_model. beside
     // its vision and audio towers; Gemma3nForCausalLM under model.
     .token = {"language_model.embed_tokens.weight", "embed_tokens.weight"}, .scale = S::kSqrtWidthInTableDType,
     .width_keys = {"hidden_size"}, .output_name = "inputs_embeds",
     .extra_outputs = {{.name = "per_layer_inputs",
                        .token = {"language_model.embed_tokens_per_layer.weight", "embed_tokens_per_layer.weight"},
                        .scale = S::kSqrtWidthInTableDType, .scale_width_key = "hidden_size_per_layer_input",
                        .rows_key = "vocab_size_per_layer_input",
                        .shape_keys = {"num_hidden_layers", "hidden_size_per_layer_input"},
                        .out_of_range = OutOfRangeIds::kRowZero}},
     .text_vocab_keys = {"vision_config.vocab_offset", "audio_config.vocab_offset"},
     .rules = "inputs_embeds: embed_tokens[id] * sqrt(hidden_size) rounded to the table dtype (ids from "
              "vision_config.vocab_offset on are the vision and audio towers' and refused); per_layer_inputs: "
              "embed_tokens_per_layer[id, or 0 for ids outside [0, vocab_size_per_layer_input)] * "
              "sqrt(hidden_size_per_layer_input) rounded to the table dtype, shaped [num_hidden_layers, "
              "hidden_size_per_layer_input]; each product rounded to the output dtype"},
    // ---- pooled models: one vector per bag of tokens (FORMAT.md 7.2) ----
    {.name = "model2vec", .model_types = {"model2vec"}, .name_prefixes = {},
     // model2vec's own layout ("embeddings"), or sentence-transformers' StaticEmbedding ("embedding.weight").
     .token = {"embeddings", "embedding.weight"}, .width_keys = {"hidden_dim"}, .pooling = PoolingMode::kMean,
     .normalize_key = "normalize", .pooling_key = "pooling", .pooling_weights = {"weights"},
     .id_map = {"mapping", "token_mapping"},
     .rules = "static model: mean of embeddings[mapping[id] if the model has a mapping, else id] (times weights[id] "
              "when it has weights) over a bag of tokens, L2-normalized when config.json says normalize"},
    {.name = "embedding_bag", .model_types = {}, .name_prefixes = {}, .token = {"weight"}, .needs_pooling = true,
     .detect_by_names = false,
     .rules = "EmbeddingBag: weight[id] pooled over a bag (the mode given to convert: sum or mean)"},
    {.name = "bloom", .model_types = {"bloom"}, .name_prefixes = {"transformer"}, .token = {"word_embeddings.weight"},
     .norm_weight = {"word_embeddings_layernorm.weight"}, .norm_bias = {"word_embeddings_layernorm.bias"},
     .width_keys = {"hidden_size", "n_embed"}, .epsilon_keys = {"layer_norm_epsilon"},
     .rules = "LayerNorm(word_embeddings[id])"},
    {.name = "t5", .model_types = {"t5", "mt5", "umt5"}, .name_prefixes = {"encoder", "shared"},
     .token = {"encoder.embed_tokens.weight", "shared.weight"}, .width_keys = {"d_model"},
     .rules = "encoder: embed_tokens[id] (no scale, no positions)"},
    // ---- encoders: BERT's module and its relatives ----
    {.name = "bert", .model_types = {"bert"}, .name_prefixes = {"bert"}, .token = kBertToken,
     .position = kBertPosition, .segment = kBertSegment, .norm_weight = kBertNormWeight, .norm_bias = kBertNormBias,
     .positions = P::kSequential, .width_keys = {"hidden_size"}, .epsilon_keys = {"layer_norm_eps"},
     .default_epsilon = 1e-12,
     .rules = "LayerNorm(word_embeddings[id] + token_type_embeddings[type] + position_embeddings[start + t])"},
    {.name = "roberta", .model_types = {"roberta", "xlm-roberta", "camembert"}, .name_prefixes = {"roberta"},
     .token = kBertToken, .position = kBertPosition, .segment = kBertSegment, .norm_weight = kBertNormWeight,
     .norm_bias = kBertNormBias, .positions = P::kPaddingAware, .width_keys = {"hidden_size"},
     .epsilon_keys = {"layer_norm_eps"},
     .rules = "LayerNorm(word_embeddings[id] + token_type_embeddings[type] + position_embeddings[p]); p = pad_token_id "
              "for pads, else pad_token_id + 1 + start + non-pad tokens before"},
    {.name = "mpnet", .model_types = {"mpnet"}, .name_prefixes = {"mpnet"}, .token = kBertToken,
     .position = kBertPosition, .norm_weight = kBertNormWeight, .norm_bias = kBertNormBias,
     .positions = P::kPaddingAware, .width_keys = {"hidden_size"}, .epsilon_keys = {"layer_norm_eps"},
     .default_epsilon = 1e-12,
     .rules = "LayerNorm(word_embeddings[id] + position_embeddings[p]); p as RoBERTa's"},
    {.name = "distilbert", .model_types = {"distilbert"}, .name_prefixes = {"distilbert"}, .token = kBertToken,
     .position = kBertPosition, .norm_weight = kBertNormWeight, .norm_bias = kBertNormBias,
     .positions = P::kSequential, .width_keys = {"dim"}, .default_epsilon = 1e-12,
     .rules = "LayerNorm(word_embeddings[id] + position_embeddings[start + t]), epsilon fixed at 1e-12"},
    {.name = "electra", .model_types = {"electra"}, .name_prefixes = {"electra"}, .token = kBertToken,
     .position = kBertPosition, .segment = kBertSegment, .norm_weight = kBertNormWeight, .norm_bias = kBertNormBias,
     .positions = P::kSequential, .width_keys = {"embedding_size"}, .epsilon_keys = {"layer_norm_eps"},
     .default_epsilon = 1e-12,
     .rules = "as BERT, width embedding_size (embeddings_project to hidden_size follows in the model)"},
    {.name = "albert", .model_types = {"albert"}, .name_prefixes = {"albert"}, .token = kBertToken,
     .position = kBertPosition, .segment = kBertSegment, .norm_weight = kBertNormWeight, .norm_bias = kBertNormBias,
     .positions = P::kSequential, .width_keys = {"embedding_size"}, .epsilon_keys = {"layer_norm_eps"},
     .default_epsilon = 1e-12,
     .rules = "as BERT, width embedding_size (embedding_hidden_mapping_in follows in the model)"},
    {.name = "deberta_v2", .model_types = {"deberta-v2"}, .name_prefixes = {"deberta"}, .token = kBertToken,
     .position = kBertPosition, .segment = kBertSegment, .norm_weight = kBertNormWeight, .norm_bias = kBertNormBias,
     .positions = P::kSequential, .positions_if = "position_biased_input", .width_keys = {"hidden_size"},
     .epsilon_keys = {"layer_norm_eps"}, .default_epsilon = 1e-7,
     .rules = "LayerNorm(word_embeddings[id] + position_embeddings[start + t] if position_biased_input + "
              "token_type_embeddings[type] if type_vocab_size > 0)"},
    {.name = "modernbert", .model_types = {"modernbert"}, .name_prefixes = {"model"},
     .token = {"embeddings.tok_embeddings.weight"}, .norm_weight = {"embeddings.norm.weight"},
     .norm_bias = {"embeddings.norm.bias"}, .width_keys = {"hidden_size"}, .epsilon_keys = {"norm_eps"},
     .rules = "LayerNorm(tok_embeddings[id]), with a bias when norm_bias"},
    {.name = "bart", .model_types = {"bart", "mbart"}, .name_prefixes = {"model"},
     .token = {"encoder.embed_tokens.weight", "shared.weight"}, .position = {"encoder.embed_positions.weight"},
     .norm_weight = {"encoder.layernorm_embedding.weight"}, .norm_bias = {"encoder.layernorm_embedding.bias"},
     .positions = P::kSequential, .position_offset = 2, .scale = S::kSqrtWidthInF32, .scale_if = "scale_embedding",
     .width_keys = {"d_model"}, .rows_extra = 2,
     .rules = "encoder: LayerNorm(embed_tokens[id] * f32(sqrt(d_model)) if scale_embedding + "
              "embed_positions[start + t + 2])"},
};

}  // namespace

std::span<const Recipe> recipes() { return kRecipes; }

}  // namespace embedrt::import
