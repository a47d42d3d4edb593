"""Builds tests/hf/cases: a tiny random model per family, saved as transformers saves it, and what the
model's own forward feeds its first layer, as raw bits.

Run in the environment tools/setup-hf-venv.sh makes (torch 2.x, transformers 5.x from PyPI):

    ./tools/setup-hf-venv.sh --run tests/hf/generate.py            # rewrite tests/hf/cases
    ./tools/setup-hf-venv.sh --run tests/hf/generate.py --check    # regenerate elsewhere, compare

Each case is `cases/<name>/model/` (config.json and weights, as save_pretrained wrote them) and
`cases/<name>/expected.json`: the ids of each run, the captured tensor's dtype and shape, and its
bytes in hex. The capture is a forward pre-hook on the first transformer layer (the hidden states
it receives) during the model's normal forward in eval mode, except ALBERT and ELECTRA, whose
embeddings module output is captured (a projection to hidden_size follows it).

Gemma 3n (gemma3n_text, gemma3n) records two named outputs per run instead of one captured tensor:
the language model's embed_tokens(ids) and get_per_layer_inputs(ids), plus what the forward feeds the
text stack (README.md, "Several outputs: Gemma 3n").

Three self-checks run for every case, so a committed expectation is known to be reproducible from
the committed files alone:
- `reference`: the formula stated in expected.json ("formula"), computed here from the tensors
  read back from the written weight files (not from the live model), must give the same bits;
- `reload`: from_pretrained(model dir) must reproduce the first run's bits;
- `--check`: a full regeneration must give byte-identical files.
"""
import argparse
import filecmp
import glob
import json
import math
import os
import shutil
import sys
import tempfile

import torch
import torch.nn.functional as F
import transformers as tf
from safetensors import safe_open

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB, L, START = 64, 7, 5
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
DTYPE_NAMES = {F32: "f32", F16: "f16", BF16: "bf16"}
BITS = {F32: torch.int32, F16: torch.int16, BF16: torch.int16}
TOKEN_TYPES = [[0, 0, 0, 1, 1, 1, 1], [0, 1, 0, 1, 0, 1, 0]]

# Small everything: one layer, two heads, tiny MLPs.
DEC = dict(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
           intermediate_size=16, max_position_embeddings=32, pad_token_id=0)
ENC = dict(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
           max_position_embeddings=32, pad_token_id=1)
# Gemma width 24: sqrt(24) = 4.898979... is not a bf16 value (bf16 rounds it to 4.90625).
GEMMA = dict(DEC, hidden_size=24, head_dim=8)
SEQ2SEQ = dict(vocab_size=VOCAB, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
               decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16, max_position_embeddings=32)


# ---------------------------------------------------------------------------------------------
# Reference formulas, computed from the tensors as read back from the saved files.
# w: {name: tensor}; cfg: config.json as a dict; ids [B, T]; types [B, T] or None; start: past length.

def rows(t, idx):
    return t[idx]


def arange_pos(ids, start, offset=0):
    return (torch.arange(ids.shape[1]) + start + offset).unsqueeze(0).expand(ids.shape)


def padding_aware_pos(ids, pad, start):
    mask = ids.ne(pad).long()
    return (torch.cumsum(mask, 1) + start) * mask + pad


def layer_norm(x, w, prefix, eps):
    bias = w.get(prefix + ".bias")
    return F.layer_norm(x, x.shape[-1:], w[prefix + ".weight"], bias, eps)


def ref_lookup(table):
    return lambda w, cfg, ids, types, start: rows(w[table], ids)


def ref_gemma(table, text_cfg=lambda c: c):
    def f(w, cfg, ids, types, start):
        t = w[table]
        scale = torch.tensor(text_cfg(cfg)["hidden_size"] ** 0.5, dtype=F32).to(t.dtype)
        return rows(t, ids) * scale
    return f


def ref_gpt2(w, cfg, ids, types, start):
    return rows(w["transformer.wte.weight"], ids) + rows(w["transformer.wpe.weight"], arange_pos(ids, start))


def ref_opt(w, cfg, ids, types, start):
    x = rows(w["model.decoder.embed_tokens.weight"], ids)
    if "model.decoder.project_in.weight" in w:
        x = F.linear(x, w["model.decoder.project_in.weight"])
    return x + rows(w["model.decoder.embed_positions.weight"], arange_pos(ids, start, 2))


def ref_bloom(w, cfg, ids, types, start):
    x = rows(w["transformer.word_embeddings.weight"], ids)
    return layer_norm(x, w, "transformer.word_embeddings_layernorm", cfg["layer_norm_epsilon"])


def ref_bert_like(prefix, positions):
    """BERT order: (word + token_type) + position, then LayerNorm(eps = layer_norm_eps)."""
    def f(w, cfg, ids, types, start):
        tt = torch.zeros_like(ids) if types is None else types
        x = rows(w[prefix + "word_embeddings.weight"], ids) + rows(w[prefix + "token_type_embeddings.weight"], tt)
        pos = padding_aware_pos(ids, cfg["pad_token_id"], start) if positions == "padding" else arange_pos(ids, start)
        x = x + rows(w[prefix + "position_embeddings.weight"], pos)
        return layer_norm(x, w, prefix + "LayerNorm", cfg["layer_norm_eps"])
    return f


def ref_mpnet(w, cfg, ids, types, start):
    x = rows(w["embeddings.word_embeddings.weight"], ids)
    x = x + rows(w["embeddings.position_embeddings.weight"], padding_aware_pos(ids, 1, start))  # padding_idx is 1, fixed
    return layer_norm(x, w, "embeddings.LayerNorm", cfg["layer_norm_eps"])


def ref_distilbert(w, cfg, ids, types, start):
    x = rows(w["embeddings.word_embeddings.weight"], ids) + rows(w["embeddings.position_embeddings.weight"],
                                                                 arange_pos(ids, 0))
    return layer_norm(x, w, "embeddings.LayerNorm", 1e-12)  # fixed, not from the config


def ref_deberta(w, cfg, ids, types, start):
    """DeBERTa-v2 order: (word + position) + token_type, then LayerNorm; the mask multiply is by ones."""
    x = rows(w["embeddings.word_embeddings.weight"], ids)
    if cfg.get("position_biased_input", True):
        x = x + rows(w["embeddings.position_embeddings.weight"], arange_pos(ids, 0))
    if cfg["type_vocab_size"] > 0:
        x = x + rows(w["embeddings.token_type_embeddings.weight"], torch.zeros_like(ids) if types is None else types)
    return layer_norm(x, w, "embeddings.LayerNorm", cfg["layer_norm_eps"])


def ref_modernbert(w, cfg, ids, types, start):
    return layer_norm(rows(w["embeddings.tok_embeddings.weight"], ids), w, "embeddings.norm", cfg["norm_eps"])


def ref_bart(w, cfg, ids, types, start):
    x = rows(w["model.shared.weight"], ids) * math.sqrt(cfg["d_model"])  # Python float: applied as f32(sqrt(d))
    x = x + rows(w["model.encoder.embed_positions.weight"], arange_pos(ids, 0, 2))
    return layer_norm(x, w, "model.encoder.layernorm_embedding", 1e-5)  # nn.LayerNorm default eps, no config key


def ref_whisper(w, cfg, ids, types, start):
    return rows(w["model.decoder.embed_tokens.weight"], ids) + rows(w["model.decoder.embed_positions.weight"],
                                                                    arange_pos(ids, start))


def ref_clip(w, cfg, ids, types, start):
    return rows(w["embeddings.token_embedding.weight"], ids) + rows(w["embeddings.position_embedding.weight"],
                                                                    arange_pos(ids, 0))


# ---------------------------------------------------------------------------------------------
# The cases. hook: module path of the first layer (pre-hook on its hidden_states) or ("output", path).
# continuation: "cache" (decoder: prefix with use_cache, then past_key_values) or None.

def case(cls, config, kwargs, dtype, hook, ref, formula, notes, fmt="st", continuation=None, token_types=False,
         paddingy=False, call="plain"):
    return dict(cls=cls, config=config, kwargs=kwargs, dtype=dtype, hook=hook, ref=ref, formula=formula, notes=notes,
                fmt=fmt, continuation=continuation, token_types=token_types, paddingy=paddingy, call=call)


LLAMA_NOTE = ("Lookup only: RoPE is applied inside attention, RMSNorm inside the layer. No scale, no positions "
              "table. tie_word_embeddings false here: lm_head.weight is a separate tensor.")
CASES = {
    "gpt2": case("GPT2LMHeadModel", "GPT2Config",
                 dict(vocab_size=VOCAB, n_embd=16, n_layer=1, n_head=2, n_inner=16, n_positions=32, pad_token_id=0),
                 F32, "transformer.h.0", ref_gpt2,
                 "f32: transformer.wte.weight[ids] + transformer.wpe.weight[start + arange(T)]",
                 "lm_head.weight is tied to transformer.wte.weight: pytorch_model.bin (transformers 4.x "
                 "safe_serialization=False layout) stores both keys over one shared storage. Positions ignore pads "
                 "(no attention_mask given). GPT2Config has no pad_token_id by default; 0 is set here.",
                 fmt="bin", continuation="cache"),
    "gptj": case("GPTJForCausalLM", "GPTJConfig",
                 dict(vocab_size=VOCAB, n_embd=16, n_layer=1, n_head=2, n_inner=16, rotary_dim=4, n_positions=32,
                      pad_token_id=0, tie_word_embeddings=False),
                 F16, "transformer.h.0", ref_lookup("transformer.wte.weight"), "f16: transformer.wte.weight[ids]",
                 "Lookup only (rotary positions live in attention). lm_head.weight and lm_head.bias are separate."),
    "gpt_neox": case("GPTNeoXForCausalLM", "GPTNeoXConfig", dict(DEC, pad_token_id=0), F16, "gpt_neox.layers.0",
                     ref_lookup("gpt_neox.embed_in.weight"), "f16: gpt_neox.embed_in.weight[ids]",
                     "Lookup only (rotary). Output head is embed_out.weight (untied)."),
    "opt": case("OPTForCausalLM", "OPTConfig",
                dict(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, ffn_dim=16,
                     max_position_embeddings=32, word_embed_proj_dim=16, pad_token_id=1),
                F16, "model.decoder.layers.0", ref_opt,
                "f16: model.decoder.embed_tokens.weight[ids] + model.decoder.embed_positions.weight[start + arange(T) + 2]",
                "Position table has max_position_embeddings + 2 rows; row = position + 2. Without attention_mask "
                "the positions are cumsum(ones) - 1 = arange (pads do not shift them; with a mask given, "
                "left pads would). lm_head.weight tied to embed_tokens: both keys in pytorch_model.bin, one storage. "
                "No embedding scale, no embedding LayerNorm (the first layer's self_attn_layer_norm is inside the layer).",
                fmt="bin", continuation="cache"),
    "opt_350m_like": case("OPTForCausalLM", "OPTConfig",
                          dict(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, ffn_dim=16,
                               max_position_embeddings=32, word_embed_proj_dim=8, pad_token_id=1,
                               do_layer_norm_before=False),
                          F16, "model.decoder.layers.0", ref_opt,
                          "f16: project_in(embed_tokens.weight[ids]) + embed_positions.weight[start + arange(T) + 2], "
                          "project_in = F.linear(x, model.decoder.project_in.weight [hidden, proj], no bias) in f16",
                          "word_embed_proj_dim (8) != hidden_size (16): the token table is [vocab, 8], project_in "
                          "(bias=False) maps it to 16 BEFORE the position add; positions are [34, 16]. project_out "
                          "exists too (not on this path). lm_head tied to embed_tokens ([vocab, 8]).",
                          continuation="cache"),
    "bloom": case("BloomForCausalLM", "BloomConfig",
                  dict(vocab_size=VOCAB, hidden_size=16, n_layer=1, n_head=2, pad_token_id=3),
                  BF16, "transformer.h.0", ref_bloom,
                  "bf16: LayerNorm_eps(transformer.word_embeddings.weight[ids]; transformer.word_embeddings_layernorm"
                  ".{weight,bias}), eps = layer_norm_epsilon, bf16 in and out (torch CPU computes the statistics in f32 "
                  "and rounds once)",
                  "ALiBi (in attention) instead of positions. lm_head tied (absent from the file)."),
    "falcon": case("FalconForCausalLM", "FalconConfig",
                   dict(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, pad_token_id=0),
                   BF16, "transformer.h.0", ref_lookup("transformer.word_embeddings.weight"),
                   "bf16: transformer.word_embeddings.weight[ids]",
                   "Lookup only (rotary by default). lm_head tied (absent from the file)."),
    "mpt": case("MptForCausalLM", "MptConfig",
                dict(vocab_size=VOCAB, d_model=16, n_layers=1, n_heads=2, expansion_ratio=1, max_seq_len=32,
                     pad_token_id=0),
                BF16, "transformer.blocks.0", ref_lookup("transformer.wte.weight"), "bf16: transformer.wte.weight[ids]",
                "Lookup only (ALiBi in attention). lm_head tied (absent from the file)."),
    "phi": case("PhiForCausalLM", "PhiConfig", dict(DEC, num_key_value_heads=2), F16, "model.layers.0",
                ref_lookup("model.embed_tokens.weight"), "f16: model.embed_tokens.weight[ids]",
                "Saved in f16 (microsoft/phi-2 ships f16). Lookup only (partial rotary in attention; embed_dropout "
                "is identity in eval). lm_head.weight and lm_head.bias separate."),
    "phi3": case("Phi3ForCausalLM", "Phi3Config", dict(DEC, pad_token_id=0), BF16, "model.layers.0",
                 ref_lookup("model.embed_tokens.weight"), "bf16: model.embed_tokens.weight[ids]", LLAMA_NOTE),
    "llama": case("LlamaForCausalLM", "LlamaConfig", DEC, BF16, "model.layers.0", ref_lookup("model.embed_tokens.weight"),
                  "bf16: model.embed_tokens.weight[ids]",
                  LLAMA_NOTE + " Saved sharded (max_shard_size 4KB): model.safetensors.index.json maps names to shards.",
                  fmt="sharded"),
    "llama_base": case("LlamaModel", "LlamaConfig", DEC, BF16, "layers.0", ref_lookup("embed_tokens.weight"),
                       "bf16: embed_tokens.weight[ids]",
                       "A bare LlamaModel saved directly: names have no 'model.' prefix and there is no lm_head."),
    "mistral": case("MistralForCausalLM", "MistralConfig", DEC, BF16, "model.layers.0",
                    ref_lookup("model.embed_tokens.weight"), "bf16: model.embed_tokens.weight[ids]", LLAMA_NOTE),
    "mixtral": case("MixtralForCausalLM", "MixtralConfig", dict(DEC, num_local_experts=2, num_experts_per_tok=1),
                    BF16, "model.layers.0", ref_lookup("model.embed_tokens.weight"),
                    "bf16: model.embed_tokens.weight[ids]", LLAMA_NOTE),
    "qwen2": case("Qwen2ForCausalLM", "Qwen2Config", DEC, BF16, "model.layers.0",
                  ref_lookup("model.embed_tokens.weight"), "bf16: model.embed_tokens.weight[ids]", LLAMA_NOTE),
    "qwen3": case("Qwen3ForCausalLM", "Qwen3Config", dict(DEC, head_dim=8), BF16, "model.layers.0",
                  ref_lookup("model.embed_tokens.weight"), "bf16: model.embed_tokens.weight[ids]", LLAMA_NOTE),
    "gemma": case("GemmaForCausalLM", "GemmaConfig", GEMMA, BF16, "model.layers.0",
                  ref_gemma("model.embed_tokens.weight"),
                  "bf16: model.embed_tokens.weight[ids] * bf16(sqrt(hidden_size)) -> bf16 (sqrt(24) applied as 4.90625)",
                  "GemmaTextScaledWordEmbedding: lookup * embed_scale.to(weight.dtype); embed_scale is a "
                  "non-persistent buffer (not in the file) = hidden_size ** 0.5, cast to the WEIGHT dtype before the "
                  "multiply, so for bf16 weights the factor is bf16(sqrt(hidden)), product rounded to bf16. "
                  "lm_head tied (absent)."),
    "gemma2": case("Gemma2ForCausalLM", "Gemma2Config", GEMMA, BF16, "model.layers.0",
                   ref_gemma("model.embed_tokens.weight"),
                   "bf16: model.embed_tokens.weight[ids] * bf16(sqrt(hidden_size)) -> bf16",
                   "Same scale rule as gemma (Gemma2TextScaledWordEmbedding). lm_head tied (absent)."),
    "gemma3_text": case("Gemma3ForCausalLM", "Gemma3TextConfig", GEMMA, BF16, "model.layers.0",
                        ref_gemma("model.embed_tokens.weight"),
                        "bf16: model.embed_tokens.weight[ids] * bf16(sqrt(hidden_size)) -> bf16",
                        "Same scale rule as gemma (Gemma3TextScaledWordEmbedding); model_type gemma3_text. "
                        "lm_head tied (absent)."),
    "gemma3": case("Gemma3ForConditionalGeneration", "Gemma3Config", None, BF16, "model.language_model.layers.0",
                   ref_gemma("language_model.model.embed_tokens.weight", lambda c: c["text_config"]),
                   "bf16: language_model.model.embed_tokens.weight[ids] * bf16(sqrt(text_config.hidden_size)) -> bf16",
                   "Multimodal wrapper: hidden_size etc. only under config.text_config. In memory the table is "
                   "model.language_model.embed_tokens, but save_pretrained writes the original checkpoint layout "
                   "'language_model.model.embed_tokens.weight' (vision tower under 'vision_tower.vision_model.', "
                   "'multi_modal_projector.'). No image token in the ids (image_token_index 62 < vocab, so no id "
                   "remapping); text-only forward = text embeddings. lm_head tied (absent)."),
    "bert": case("BertForMaskedLM", "BertConfig", dict(ENC, type_vocab_size=2, pad_token_id=0), F32,
                 "bert.encoder.layer.0", ref_bert_like("bert.embeddings.", "arange"),
                 "f32: LayerNorm_eps((word_embeddings[ids] + token_type_embeddings[tt]) + position_embeddings[arange(T)]) "
                 "under bert.embeddings., eps = layer_norm_eps",
                 "Addition order: word + token_type first, then + position. Absolute positions (arange, pads not "
                 "special). tt defaults to zeros. cls.predictions.decoder.weight tied to word_embeddings: both keys "
                 "in pytorch_model.bin (one storage), plus cls.predictions.bias.", fmt="bin", token_types=True),
    "roberta": case("RobertaForMaskedLM", "RobertaConfig", dict(ENC, type_vocab_size=1), F32,
                    "roberta.encoder.layer.0", ref_bert_like("roberta.embeddings.", "padding"),
                    "f32: LayerNorm_eps((word[ids] + token_type[0]) + position[pos]) under roberta.embeddings., "
                    "pos = pad (for pads) else pad + start + (index among non-pads, from 1)",
                    "Padding-aware positions: mask = ids != pad_token_id; pos = (cumsum(mask) + start) * mask + pad. "
                    "Row pad_token_id of the position table is zero (padding_idx init). The continuation run passes "
                    "a cache (past_key_values) through RobertaForMaskedLM's forward: embeddings get "
                    "past_key_values_length = 5, pads in the continuation still get pad. lm_head.decoder.weight tied "
                    "(absent).", continuation="cache", paddingy=True),
    "xlm_roberta": case("XLMRobertaModel", "XLMRobertaConfig", dict(ENC, type_vocab_size=2), F32, "encoder.layer.0",
                        ref_bert_like("embeddings.", "padding"),
                        "f32: LayerNorm_eps((word[ids] + token_type[tt]) + position[padding-aware pos]) under embeddings.",
                        "Same names and type_vocab_size as a BERT but model_type xlm-roberta: padding-aware "
                        "positions as roberta. Bare model: no prefix.", continuation="cache", token_types=True,
                        paddingy=True),
    "camembert": case("CamembertModel", "CamembertConfig", dict(ENC, type_vocab_size=1), F32, "encoder.layer.0",
                      ref_bert_like("embeddings.", "padding"),
                      "f32: LayerNorm_eps((word[ids] + token_type[0]) + position[padding-aware pos]) under embeddings.",
                      "As roberta. Bare model: no prefix.", continuation="cache", paddingy=True),
    "mpnet": case("MPNetModel", "MPNetConfig", dict(ENC), F32, "encoder.layer.0", ref_mpnet,
                  "f32: LayerNorm_eps(word[ids] + position[padding-aware pos with pad = 1]) under embeddings.",
                  "MPNetEmbeddings hard-codes padding_idx = 1 (not config.pad_token_id) for positions and the word "
                  "table; no token types. No past_key_values in MPNetModel.forward: no continuation run. Relative "
                  "attention bias (encoder.relative_attention_bias) is computed in the encoder, not added to the "
                  "hidden states.", paddingy=True),
    "distilbert": case("DistilBertModel", "DistilBertConfig",
                       dict(vocab_size=VOCAB, dim=16, n_layers=1, n_heads=2, hidden_dim=16, max_position_embeddings=32,
                            pad_token_id=0),
                       F32, "transformer.layer.0", ref_distilbert,
                       "f32: LayerNorm_1e-12(word_embeddings[ids] + position_embeddings[arange(T)]) under embeddings.",
                       "LayerNorm eps is the constant 1e-12 (no config key). No token types. Width key is 'dim'."),
    "electra": case("ElectraModel", "ElectraConfig", dict(ENC, embedding_size=8, type_vocab_size=2, pad_token_id=0),
                    F32, ("output", "embeddings"), ref_bert_like("embeddings.", "arange"),
                    "f32: LayerNorm_eps((word[ids] + token_type[tt]) + position[arange(T)]) under embeddings., "
                    "width embedding_size (8)",
                    "Captured: the embeddings module OUTPUT (width embedding_size). ElectraModel then applies "
                    "embeddings_project (Linear 8 -> 16, with bias) before the encoder.", token_types=True),
    "albert": case("AlbertModel", "AlbertConfig", dict(ENC, embedding_size=8, type_vocab_size=2, pad_token_id=0),
                   F32, ("output", "embeddings"), ref_bert_like("embeddings.", "arange"),
                   "f32: LayerNorm_eps((word[ids] + token_type[tt]) + position[arange(T)]) under embeddings., "
                   "width embedding_size (8)",
                   "Captured: the embeddings module OUTPUT (width embedding_size). AlbertTransformer applies "
                   "encoder.embedding_hidden_mapping_in (Linear 8 -> 16) before the shared layer.", token_types=True),
    "deberta_v2": case("DebertaV2Model", "DebertaV2Config",
                       dict(ENC, position_biased_input=False, type_vocab_size=0, relative_attention=True,
                            pos_att_type=["p2c", "c2p"], pad_token_id=0),
                       F32, "encoder.layer.0", ref_deberta,
                       "f32: LayerNorm_eps(embeddings.word_embeddings.weight[ids]) (no position, no token type table)",
                       "deberta-v3 style: position_biased_input false (no embeddings.position_embeddings in the file), "
                       "type_vocab_size 0 (no token_type_embeddings). Relative positions (encoder.rel_embeddings) are "
                       "used in attention only. After the LayerNorm the embeddings are multiplied by the attention "
                       "mask (DebertaV2Model passes attention_mask = ones when none is given: identity here; with a "
                       "user mask, padded rows would become 0)."),
    "deberta_v2_abs": case("DebertaV2Model", "DebertaV2Config",
                           dict(ENC, position_biased_input=True, type_vocab_size=2, pad_token_id=0), F32,
                           "encoder.layer.0", ref_deberta,
                           "f32: LayerNorm_eps((word[ids] + position[arange(T)]) + token_type[tt]) under embeddings.",
                           "Addition order differs from BERT: word + position first, then + token_type. Mask "
                           "multiply by ones as in deberta_v2. embedding_size == hidden_size (no embed_proj).",
                           token_types=True),
    "modernbert": case("ModernBertModel", "ModernBertConfig",
                       dict(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=16, norm_bias=False, pad_token_id=0, max_position_embeddings=32),
                       F32, "layers.0", ref_modernbert,
                       "f32: LayerNorm_norm_eps(embeddings.tok_embeddings.weight[ids]; embeddings.norm.weight, no bias)",
                       "norm_bias false: nn.LayerNorm(bias=False), no embeddings.norm.bias in the file. eps key: "
                       "norm_eps. RoPE positions (attention only)."),
    "modernbert_bias": case("ModernBertModel", "ModernBertConfig",
                            dict(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=16, norm_bias=True, pad_token_id=0, max_position_embeddings=32),
                            F32, "layers.0", ref_modernbert,
                            "f32: LayerNorm_norm_eps(embeddings.tok_embeddings.weight[ids]; embeddings.norm.{weight,bias})",
                            "norm_bias true: embeddings.norm.bias present."),
    "t5": case("T5ForConditionalGeneration", "T5Config",
               dict(vocab_size=VOCAB, d_model=16, d_kv=8, d_ff=16, num_layers=1, num_heads=2, pad_token_id=0,
                    decoder_start_token_id=0),
               F32, "encoder.block.0", ref_lookup("shared.weight"), "f32: shared.weight[ids]",
               "Encoder side. encoder.embed_tokens, decoder.embed_tokens and lm_head are tied to shared.weight and "
               "absent from the file (tie_word_embeddings true). No scale on the input side, relative position bias "
               "in attention.", call="seq2seq"),
    "bart": case("BartForConditionalGeneration", "BartConfig", dict(SEQ2SEQ, d_model=24, scale_embedding=True,
                                                                     pad_token_id=1),
                 F32, "model.encoder.layers.0", ref_bart,
                 "f32: LayerNorm_1e-5(model.shared.weight[ids] * f32(sqrt(d_model)) + model.encoder.embed_positions"
                 ".weight[arange(T) + 2]; model.encoder.layernorm_embedding.{weight,bias})",
                 "Encoder side. Table: model.shared.weight (encoder/decoder embed_tokens and lm_head tied, absent). "
                 "scale_embedding true: x * sqrt(d_model) with a Python float, i.e. f32(sqrt(24)) = 4.8989797 in f32. "
                 "Positions: arange + 2 (offset 2; pads not special), table has max_position_embeddings + 2 rows. "
                 "layernorm_embedding eps is nn.LayerNorm's default 1e-5 (no config key).", call="seq2seq"),
    "mbart": case("MBartForConditionalGeneration", "MBartConfig", dict(SEQ2SEQ, d_model=24, scale_embedding=True,
                                                                        pad_token_id=1),
                  F32, "model.encoder.layers.0", ref_bart,
                  "f32: LayerNorm_1e-5(model.shared.weight[ids] * f32(sqrt(d_model)) + model.encoder.embed_positions"
                  ".weight[arange(T) + 2]; model.encoder.layernorm_embedding.{weight,bias})",
                  "As bart (MBartScaledWordEmbedding, offset 2, layernorm_embedding). mBART also has "
                  "model.encoder.layer_norm (final, after the layers - not on this path).", call="seq2seq"),
    "whisper": case("WhisperForConditionalGeneration", "WhisperConfig",
                    dict(vocab_size=VOCAB, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                         decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16, num_mel_bins=8,
                         max_source_positions=8, max_target_positions=32, pad_token_id=0, decoder_start_token_id=1),
                    F32, "model.decoder.layers.0", ref_whisper,
                    "f32: model.decoder.embed_tokens.weight[ids] + model.decoder.embed_positions.weight[start + arange(T)]",
                    "DECODER side (the token table is the decoder's). No offset, pads not special. "
                    "WhisperDecoder computes embed_scale from scale_embedding but never applies it (transformers "
                    "5.x): no scale whatever the config says (false here, as in real checkpoints). proj_out tied "
                    "(absent).", continuation="cache", call="whisper"),
    "clip": case("CLIPTextModel", "CLIPTextConfig",
                 dict(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=16, max_position_embeddings=32, pad_token_id=0, eos_token_id=2),
                 F32, "encoder.layers.0", ref_clip,
                 "f32: embeddings.token_embedding.weight[ids] + embeddings.position_embedding.weight[arange(T)]",
                 "CLIPTextModel in transformers 5.x has no text_model wrapper: names start with 'embeddings.' "
                 "(a CLIPModel checkpoint has them under 'text_model.'). No LayerNorm before the encoder."),
}


def make_config(name, c):
    if name == "gemma3":
        return tf.Gemma3Config(text_config=dict(GEMMA), vision_config=dict(hidden_size=16, intermediate_size=16,
                                                                           num_hidden_layers=1, num_attention_heads=2,
                                                                           image_size=32, patch_size=16),
                               mm_tokens_per_image=4, image_token_index=VOCAB - 2, boi_token_index=VOCAB - 3,
                               eoi_token_index=VOCAB - 4)
    return getattr(tf, c["config"])(**c["kwargs"])


def randomize_norms(model):
    """Non-trivial norm weights and biases (default init is 1 and 0) so their handling is tested."""
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, p in model.named_parameters():
            low = name.lower()
            if p.dim() == 1 and ("norm" in low or "ln" in low):
                base = 1.0 if name.endswith("weight") else 0.0
                p.copy_((base + 0.2 * torch.randn(p.shape, generator=g)).to(p.dtype))


def pad_id(config):
    pad = getattr(config.get_text_config(), "pad_token_id", None)
    return 0 if pad is None else pad


def sample_ids(config, paddingy, seed=7, length=L):
    """Random ids with id 0, the last row (VOCAB - 1) and the pad id in them."""
    pad = pad_id(config)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB - 5, (2, length), generator=g)  # VOCAB-4..VOCAB-2: gemma3 image markers
    ids[0, 0] = 0
    ids[0, 3] = VOCAB - 1
    ids[1, 1] = VOCAB - 1
    if paddingy:  # RoBERTa-like: a pad in the middle of sequence 0, pads at the end of sequence 1
        ids[0, 2] = pad
        ids[1, -2:] = pad
    else:
        ids[1, -1] = pad
    return ids


def module_at(model, path):
    m = model
    for part in path.split("."):
        m = m[int(part)] if part.isdigit() else getattr(m, part)
    return m


def capture(model, where, call):
    """Runs call() and returns the tensor the hooked layer receives (or, for ("output", path), returns)."""
    got = []
    if isinstance(where, tuple):
        handle = module_at(model, where[1]).register_forward_hook(lambda m, a, out: got.append(out))
    else:
        def pre(m, args, kwargs):
            got.append(args[0] if args else kwargs["hidden_states"])
        handle = module_at(model, where).register_forward_pre_hook(pre, with_kwargs=True)
    try:
        with torch.no_grad():
            result = call()
    finally:
        handle.remove()
    assert len(got) == 1, f"hook ran {len(got)} times"
    return got[0].detach().contiguous(), result


def hex_of(t):
    return t.contiguous().view(BITS[t.dtype]).numpy().tobytes().hex()


def run_record(tensor, ids, types, start):
    return {"input_ids": ids.tolist(), "token_type_ids": None if types is None else types.tolist(), "start": start,
            "output_dtype": DTYPE_NAMES[tensor.dtype], "shape": list(tensor.shape), "output_hex": hex_of(tensor)}


def runs_for(name, c, model, config):
    """The captured runs: (tensor, ids, types, start) for the plain run and, where asked, a continuation."""
    dtype, where = c["dtype"], c["hook"]
    ids = sample_ids(config, c["paddingy"])
    types = torch.tensor(TOKEN_TYPES) if c["token_types"] else None
    features = None
    if c["call"] == "whisper":
        features = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(3)).to(dtype)

    def forward(x, types=None, **extra):
        args = dict(extra)
        if c["call"] == "whisper":
            args.update(input_features=features, decoder_input_ids=x)
        else:
            args["input_ids"] = x
        if types is not None:
            args["token_type_ids"] = types
        if c["call"] == "seq2seq":
            args["decoder_input_ids"] = x[:, :2]
        return model(**args)

    out = []
    t, _ = capture(model, where, lambda: forward(ids, types))
    out.append((t, ids, types, 0))
    if c["continuation"] == "cache":
        prefix = sample_ids(config, c["paddingy"], seed=9, length=START)
        cont = sample_ids(config, c["paddingy"], seed=11, length=4)
        if c["paddingy"]:  # a pad inside the continuation of sequence 0 too
            cont[0, 1] = pad_id(config)
        if c["call"] == "whisper" or getattr(config, "is_decoder", False) or name in ("gpt2", "opt", "opt_350m_like"):
            with torch.no_grad():
                first = forward(prefix, use_cache=True)
            cache = first.past_key_values
        else:  # encoder-only RoBERTa-likes: their forward takes a cache object and fills it
            cache = tf.DynamicCache(config=config)
            with torch.no_grad():
                forward(prefix, None if types is None else types[:, :START], past_key_values=cache, use_cache=True)
        assert cache.get_seq_length() == START, (name, cache.get_seq_length())
        ctypes = None if types is None else types[:, :4]
        t, _ = capture(model, where, lambda: forward(cont, ctypes, past_key_values=cache, use_cache=True))
        out.append((t, cont, ctypes, START))
    return out


def read_weights(model_dir):
    files = sorted(glob.glob(os.path.join(model_dir, "*.safetensors")))
    w = {}
    for f in files:
        with safe_open(f, "pt") as s:
            for k in s.keys():
                w[k] = s.get_tensor(k)
    for f in sorted(glob.glob(os.path.join(model_dir, "*.bin"))):
        w.update(torch.load(f, map_location="cpu", weights_only=True))
    return w


def save(model, model_dir, fmt):
    if fmt == "sharded":
        model.save_pretrained(model_dir, max_shard_size="4KB")
        assert len(glob.glob(os.path.join(model_dir, "model-*-of-*.safetensors"))) >= 2
    else:
        model.save_pretrained(model_dir)  # transformers 5.x writes safetensors only
    if fmt == "bin":
        # transformers 5.x has no safe_serialization=False. Write what 4.x's save_pretrained(
        # safe_serialization=False) wrote: torch.save of the whole state_dict (tied keys included, sharing
        # one storage) as pytorch_model.bin, under the names save_pretrained uses (checked against its file).
        st = os.path.join(model_dir, "model.safetensors")
        with safe_open(st, "pt") as s:
            saved = set(s.keys())
        state = model.state_dict()
        assert saved <= set(state), sorted(saved - set(state))
        for k in set(state) - saved:  # every extra key must alias a saved tensor
            assert any(state[k].data_ptr() == state[s].data_ptr() for s in saved), k
        torch.save(state, os.path.join(model_dir, "pytorch_model.bin"))
        os.unlink(st)
    for extra in os.listdir(model_dir):
        if extra not in ("config.json", "model.safetensors.index.json", "pytorch_model.bin") and \
                not extra.endswith(".safetensors"):
            os.unlink(os.path.join(model_dir, extra))


def generate(name, out_dir):
    c = CASES[name]
    dtype = c["dtype"]
    torch.manual_seed(sum(map(ord, name)))
    config = make_config(name, c)
    model = getattr(tf, c["cls"])(config).to(dtype).eval()
    randomize_norms(model)
    runs = runs_for(name, c, model, config)

    case_dir = os.path.join(out_dir, name)
    shutil.rmtree(case_dir, ignore_errors=True)
    model_dir = os.path.join(case_dir, "model")
    save(model, model_dir, c["fmt"])

    # Self-check 1: the stated formula, from the tensors read back from the files, gives the same bits.
    w = read_weights(model_dir)
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    for t, ids, types, start in runs:
        want = c["ref"](w, cfg, ids, types, start)
        assert want.dtype == t.dtype and want.shape == t.shape and hex_of(want) == hex_of(t), \
            f"{name}: reference formula differs from transformers (start {start})"
    # Self-check 2: the saved folder, loaded by transformers, reproduces the first run.
    reloaded = getattr(tf, c["cls"]).from_pretrained(model_dir, dtype=dtype).eval()
    t0, ids0, types0, _ = runs[0]
    again = runs_for(name, dict(c, continuation=None), reloaded, reloaded.config)[0][0]
    assert hex_of(again) == hex_of(t0), f"{name}: from_pretrained of the saved folder differs"

    hook = c["hook"]
    doc = {"case": name, "model_type": config.model_type, "architecture": c["cls"],
           "torch_dtype": str(dtype).replace("torch.", ""),
           "captured": (f"output of {hook[1]} (module output, before the projection to hidden_size)"
                        if isinstance(hook, tuple) else f"input (hidden_states) of {hook}"),
           "formula": c["formula"], "notes": c["notes"],
           "format": {"st": "safetensors", "bin": "pytorch_model.bin", "sharded": "sharded safetensors"}[c["fmt"]],
           "versions": {"torch": torch.__version__.split("+")[0], "transformers": tf.__version__},
           "runs": [run_record(*r) for r in runs]}
    with open(os.path.join(case_dir, "expected.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


# ---------------------------------------------------------------------------------------------
# Several named outputs per model (issue 13): Gemma 3n. Each run records, as raw bits, what the model's own
# methods return for the ids (the outputs embedrt serves) and what its forward feeds the text stack (captured),
# and the self-checks tie both to formulas over the tensors read back from the files.

# vocab_size_per_layer_input (48) < vocab_size (64): ids 48..63 lie past the per-layer table. In the wrapper they
# are the vision (48..55) and audio (56..63) token ranges, as in the real checkpoints (262144 text ids, then 128
# vision and 128 audio ids). sqrt(24) = 4.898979 and sqrt(12) = 3.4641016 are not bf16 values (4.90625, 3.46875).
GEMMA3N_PER_LAYER_VOCAB = 48
GEMMA3N_TEXT = dict(vocab_size=VOCAB, vocab_size_per_layer_input=GEMMA3N_PER_LAYER_VOCAB, hidden_size=24,
                    hidden_size_per_layer_input=12, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                    head_dim=8, intermediate_size=16, max_position_embeddings=32, sliding_window=8,
                    num_kv_shared_layers=0, laurel_rank=2, altup_num_inputs=2, pad_token_id=0)
# The wrapper's towers, as small as transformers accepts: a timm test network for vision (the real one is
# mobilenetv5_300m_enc; the tower is not on the text path), a one-block conformer for audio.
GEMMA3N_VISION = dict(architecture="test_efficientnet", hidden_size=8, vocab_size=8,
                      vocab_offset=GEMMA3N_PER_LAYER_VOCAB)
GEMMA3N_AUDIO = dict(hidden_size=8, vocab_size=8, vocab_offset=GEMMA3N_PER_LAYER_VOCAB + 8, input_feat_size=8,
                     sscp_conv_channel_size=[4, 4], conf_num_hidden_layers=1, conf_num_attention_heads=2)
GEMMA3N_IDS = [[0, 17, 48, 63, 5, 47, 52], [63, 1, 56, 33, 60, 9, 0]]

GEMMA3N_TEXT_NOTES = (
    "Two outputs. inputs_embeds = Gemma3nTextScaledWordEmbedding embed_tokens: lookup * embed_scale.to(weight.dtype), "
    "embed_scale a non-persistent f32 buffer torch.tensor(hidden_size ** 0.5) (not in the file), so the factor is "
    "bf16(f32(sqrt(hidden_size))) = 4.90625 and the bf16 x bf16 product is rounded once to bf16. per_layer_inputs = "
    "get_per_layer_inputs(ids): ids' = where(0 <= ids < vocab_size_per_layer_input, ids, 0) (negative ids map to 0 "
    "too), embed_tokens_per_layer(ids') * bf16(f32(sqrt(hidden_size_per_layer_input))) (= 3.46875), reshaped to "
    "[B, L, num_hidden_layers, hidden_size_per_layer_input]; the table is [vocab_size_per_layer_input, "
    "num_hidden_layers * hidden_size_per_layer_input], row-major, layer-major within a row. The forward then mixes "
    "it with a projection of inputs_embeds (project_per_layer_inputs: per_layer_model_projection, "
    "per_layer_projection_norm, add, * 1/sqrt(2)) - matmuls on the hidden state, not captured here. Row 0 (the pad "
    "row, zero at init) of both tables was randomized so the id -> 0 mapping is visible in the bits.")
GEMMA3N_CASES = {
    "gemma3n_text": dict(cls="Gemma3nForCausalLM", prefix="model.", text_cfg=lambda c: c,
                         notes=GEMMA3N_TEXT_NOTES + " Gemma3nForCausalLM (model_type gemma3n_text): every config key "
                         "at the top level; names model.embed_tokens.weight [vocab_size, hidden_size], "
                         "model.embed_tokens_per_layer.weight; lm_head tied (absent). The forward feeds the stack "
                         "embed_tokens(ids) for every id < vocab_size (no multimodal remapping in the text-only "
                         "model)."),
    "gemma3n": dict(cls="Gemma3nForConditionalGeneration", prefix="model.language_model.",
                    text_cfg=lambda c: c["text_config"],
                    notes=GEMMA3N_TEXT_NOTES + " Gemma3nForConditionalGeneration (model_type gemma3n): the text keys "
                    "(vocab_size, vocab_size_per_layer_input, hidden_size, hidden_size_per_layer_input, "
                    "num_hidden_layers, pad_token_id, rms_norm_eps) only under config.text_config; saved under "
                    "model.language_model. (not the original checkpoint layout that Gemma 3 uses); vision tower "
                    "under model.vision_tower.timm_model., audio under model.audio_tower., model.embed_vision., "
                    "model.embed_audio.; lm_head tied (absent). DIFFERENCE in the forward: Gemma3nModel replaces "
                    "the inputs_embeds of ids in [vision_config.vocab_offset, audio_config.vocab_offset) by "
                    "embed_vision(ids) and of ids >= audio_config.vocab_offset by embed_audio(ids) (an embedding "
                    "row of its own table, RMSNorm, a projection, RMSNorm) before the text stack; "
                    "'forward_fed_differs_at' lists those positions. per_layer_inputs is fed unchanged."),
}


def gemma3n_scale(value, dtype):
    """embed_scale as the module applies it: an f32 tensor of the Python float, cast to the weight dtype."""
    return torch.tensor(value ** 0.5, dtype=F32).to(dtype)


def ref_gemma3n(w, cfg, prefix, ids):
    """Both outputs from the tensors read back from the file; every operation rounds to bf16."""
    table = w[prefix + "embed_tokens.weight"]
    per_layer = w[prefix + "embed_tokens_per_layer.weight"]
    embeds = rows(table, ids) * gemma3n_scale(cfg["hidden_size"], table.dtype)
    mapped = torch.where((ids >= 0) & (ids < cfg["vocab_size_per_layer_input"]), ids, 0)
    per = rows(per_layer, mapped) * gemma3n_scale(cfg["hidden_size_per_layer_input"], per_layer.dtype)
    return {"inputs_embeds": embeds,
            "per_layer_inputs": per.reshape(*ids.shape, cfg["num_hidden_layers"], cfg["hidden_size_per_layer_input"])}


def gemma3n_config(name):
    if name == "gemma3n_text":
        return tf.Gemma3nTextConfig(**GEMMA3N_TEXT)
    return tf.Gemma3nConfig(text_config=dict(GEMMA3N_TEXT), vision_config=dict(GEMMA3N_VISION),
                            audio_config=dict(GEMMA3N_AUDIO), image_token_id=49, audio_token_id=57,
                            boi_token_id=47, eoi_token_id=48, boa_token_id=46, eoa_token_id=56)


def gemma3n_runs(model, ids):
    """(outputs by the model's methods, what the forward feeds the text stack) for one batch of ids."""
    text = model.model if isinstance(model, tf.Gemma3nForCausalLM) else model.model.language_model
    with torch.no_grad():
        outputs = {"inputs_embeds": text.embed_tokens(ids), "per_layer_inputs": text.get_per_layer_inputs(ids)}
    fed = {}
    if isinstance(model, tf.Gemma3nForCausalLM):  # the text model computes both inside its forward
        def keep(key):
            return lambda m, args, out: fed.__setitem__(key, out)
        hooks = [text.embed_tokens.register_forward_hook(keep("inputs_embeds")),
                 text.embed_tokens_per_layer.register_forward_hook(keep("per_layer_table"))]
    else:  # Gemma3nModel computes both and passes them to the text model as keyword arguments
        def pre(m, args, kwargs):
            fed["inputs_embeds"], fed["per_layer_inputs"] = kwargs["inputs_embeds"], kwargs["per_layer_inputs"]
        hooks = [text.register_forward_pre_hook(pre, with_kwargs=True)]
    first_layer = []
    hooks.append(text.layers[0].register_forward_pre_hook(
        lambda m, args, kwargs: first_layer.append(args[0] if args else kwargs["hidden_states"]), with_kwargs=True))
    try:
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        for h in hooks:
            h.remove()
    if "per_layer_table" in fed:
        fed["per_layer_inputs"] = fed.pop("per_layer_table").reshape(outputs["per_layer_inputs"].shape)
    # The first layer's hidden_states[0] (altup stream 0) is the fed inputs_embeds, unchanged.
    assert torch.equal(first_layer[0][0], fed["inputs_embeds"]), "layer 0 does not receive inputs_embeds"
    return ({k: v.detach().contiguous() for k, v in outputs.items()},
            {k: v.detach().contiguous() for k, v in fed.items()})


def tensor_record(t):
    return {"output_dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape), "output_hex": hex_of(t)}


def generate_gemma3n(name, out_dir):
    c = GEMMA3N_CASES[name]
    torch.manual_seed(sum(map(ord, name)))
    config = gemma3n_config(name)
    model = getattr(tf, c["cls"])(config).to(BF16).eval()
    randomize_norms(model)
    text = model.model if name == "gemma3n_text" else model.model.language_model
    g = torch.Generator().manual_seed(4321)
    with torch.no_grad():  # a non-zero pad row, so mapping an id to row 0 is told apart from zeros
        for table in (text.embed_tokens, text.embed_tokens_per_layer):
            table.weight[0] = (0.02 * torch.randn(table.weight.shape[1], generator=g)).to(BF16)
    ids = torch.tensor(GEMMA3N_IDS)
    outputs, fed = gemma3n_runs(model, ids)

    case_dir = os.path.join(out_dir, name)
    shutil.rmtree(case_dir, ignore_errors=True)
    model_dir = os.path.join(case_dir, "model")
    save(model, model_dir, "st")

    w = read_weights(model_dir)
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    tcfg = c["text_cfg"](cfg)
    # Self-check 1: the formulas, from the tensors read back from the file, give the methods' bits.
    want = ref_gemma3n(w, tcfg, c["prefix"], ids)
    for key, t in outputs.items():
        assert want[key].dtype == t.dtype and want[key].shape == t.shape and hex_of(want[key]) == hex_of(t), \
            f"{name}: reference formula for {key} differs from transformers"
    # The rounding rule matters on these bits: an f32 product with the f32 sqrt, rounded once, differs.
    table = w[c["prefix"] + "embed_tokens.weight"]
    f32_product = (rows(table, ids).float() * torch.tensor(tcfg["hidden_size"] ** 0.5, dtype=F32)).to(BF16)
    assert hex_of(f32_product) != hex_of(outputs["inputs_embeds"]), f"{name}: ids do not tell the scale rules apart"
    # What the forward feeds: per_layer_inputs always as returned; inputs_embeds as returned except, in the
    # wrapper, at vision/audio ids (replaced by the multimodal embedders).
    assert torch.equal(fed["per_layer_inputs"], outputs["per_layer_inputs"]), f"{name}: fed per_layer_inputs differ"
    same = (fed["inputs_embeds"] == outputs["inputs_embeds"]).all(-1)
    differs_at = [[b, t] for b, t in (~same).nonzero().tolist()]
    multimodal = ids >= (cfg["vision_config"]["vocab_offset"] if "vision_config" in cfg else VOCAB)
    assert torch.equal(~same, multimodal), f"{name}: fed inputs_embeds differ at {differs_at}"
    # Self-check 2: the saved folder, loaded by transformers, reproduces the outputs.
    reloaded = getattr(tf, c["cls"]).from_pretrained(model_dir, dtype=BF16).eval()
    again, _ = gemma3n_runs(reloaded, ids)
    for key in outputs:
        assert hex_of(again[key]) == hex_of(outputs[key]), f"{name}: from_pretrained of the saved folder differs"

    # Negative ids: embed_tokens refuses them (IndexError); get_per_layer_inputs maps them to row 0 like ids past
    # its table. Recorded on their own, for the per-layer output only.
    negative = torch.tensor([[-1, -VOCAB, 0, GEMMA3N_PER_LAYER_VOCAB - 1, GEMMA3N_PER_LAYER_VOCAB]])
    with torch.no_grad():
        negative_out = text.get_per_layer_inputs(negative).contiguous()
    assert hex_of(negative_out) == hex_of(ref_gemma3n(w, tcfg, c["prefix"], negative)["per_layer_inputs"])

    p = c["prefix"]
    formulas = {
        "inputs_embeds": f"bf16: {p}embed_tokens.weight[ids] * bf16(f32(sqrt(hidden_size))) -> bf16",
        "per_layer_inputs": f"bf16: {p}embed_tokens_per_layer.weight[where(0 <= ids < vocab_size_per_layer_input, "
                            "ids, 0)] * bf16(f32(sqrt(hidden_size_per_layer_input))) -> bf16, reshaped "
                            "[B, L, num_hidden_layers, hidden_size_per_layer_input]",
    }
    methods = {"inputs_embeds": f"{p}embed_tokens(ids)", "per_layer_inputs": f"{p[:-1]}.get_per_layer_inputs(ids)"}
    doc = {"case": name, "model_type": config.model_type, "architecture": c["cls"], "torch_dtype": "bfloat16",
           "outputs": [{"name": k, "recorded": methods[k], "formula": formulas[k]} for k in outputs],
           "notes": c["notes"], "format": "safetensors",
           "versions": {"torch": torch.__version__.split("+")[0], "transformers": tf.__version__},
           "runs": [{"input_ids": ids.tolist(), "token_type_ids": None, "start": 0,
                     "outputs": {k: tensor_record(t) for k, t in outputs.items()},
                     "forward_fed": {k: tensor_record(t) for k, t in fed.items()},
                     "forward_fed_differs_at": differs_at}],
           "per_layer_inputs_of_negative_ids": dict(input_ids=negative.tolist(), **tensor_record(negative_out))}
    with open(os.path.join(case_dir, "expected.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def compare_bin(a, b):
    """pytorch_model.bin: byte equality, or else equal names, dtypes, shapes and bytes of every tensor."""
    if filecmp.cmp(a, b, shallow=False):
        return True
    x, y = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    return x.keys() == y.keys() and all(x[k].dtype == y[k].dtype and torch.equal(x[k], y[k]) for k in x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true", help="regenerate into a temporary folder and compare")
    parser.add_argument("cases", nargs="*", help="only these cases")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    tf.logging.set_verbosity_error()
    tf.utils.logging.disable_progress_bar()
    names = args.cases or list(CASES) + list(GEMMA3N_CASES)
    committed = os.path.join(HERE, "cases")
    out = tempfile.mkdtemp(prefix="embedrt-hf-") if args.check else committed
    failed = []
    for name in names:
        try:
            (generate_gemma3n if name in GEMMA3N_CASES else generate)(name, out)
            print("generated", name, file=sys.stderr)
        except Exception as e:  # report every case, then fail
            failed.append(name)
            print(f"FAILED {name}: {type(e).__name__}: {e}", file=sys.stderr)
    if not args.check:
        stale = sorted(set(os.listdir(committed)) - set(CASES) - set(GEMMA3N_CASES))
        for s in stale:
            print("not a case (left alone):", s, file=sys.stderr)
    else:
        mismatches, compared, by_tensor = [], 0, 0
        for name in names:
            mine_files = {os.path.relpath(os.path.join(r, f), out) for r, _, fs in os.walk(os.path.join(out, name))
                          for f in fs}
            theirs_files = {os.path.relpath(os.path.join(r, f), committed)
                            for r, _, fs in os.walk(os.path.join(committed, name)) for f in fs}
            for rel in sorted(mine_files | theirs_files):
                mine, theirs = os.path.join(out, rel), os.path.join(committed, rel)
                compared += 1
                if not (os.path.exists(mine) and os.path.exists(theirs)):
                    mismatches.append(rel + " (only on one side)")
                elif rel.endswith(".bin"):
                    if not filecmp.cmp(mine, theirs, shallow=False):
                        by_tensor += 1
                    if not compare_bin(mine, theirs):
                        mismatches.append(rel)
                elif not filecmp.cmp(mine, theirs, shallow=False):
                    mismatches.append(rel)
        for m in mismatches:
            print("DIFFERS", m)
        print(f"{len(names) - len(failed)} of {len(names)} cases regenerated, {compared} files compared, "
              f"{len(mismatches)} differ from the committed ones"
              + (f" ({by_tensor} .bin compared tensor by tensor: bytes differ)" if by_tensor else
                 " (every file byte-identical)" if not mismatches else ""))
        shutil.rmtree(out, ignore_errors=True)
        failed += mismatches
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
