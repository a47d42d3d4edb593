"""Builds tests/hf/cases: a tiny random model per family, saved with save_pretrained, and what the
model's own forward feeds its first layer, as raw bits.

Run in the environment tools/setup-hf-venv.sh makes (torch 2.x, transformers 5.x from PyPI):

    ./tools/setup-hf-venv.sh --run tests/hf/generate.py            # rewrite tests/hf/cases
    ./tools/setup-hf-venv.sh --run tests/hf/generate.py --check    # regenerate elsewhere, compare

Each case is `cases/<name>/model/` (config.json and weights, exactly as save_pretrained wrote
them) and `cases/<name>/expected.json`: the ids of each run, the captured tensor's dtype and
shape, and its bytes in hex. The capture is a forward pre-hook on the first transformer layer
(the hidden states it receives), except ALBERT and ELECTRA, whose embeddings module output is
captured (a projection to hidden_size follows it). Decoders with a position table also record a
KV-cache continuation: a prefix run with use_cache, then the continuation with past_key_values.
"""
import argparse
import filecmp
import json
import os
import shutil
import sys
import tempfile

import torch
import transformers as tf

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB, HIDDEN, L = 64, 16, 7
SMALL = dict(num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)


def llama_like(cls_config, **extra):
    return dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_key_value_heads=1, max_position_embeddings=64,
                pad_token_id=0, **SMALL, **extra)


def bert_like(**extra):
    base = dict(vocab_size=VOCAB, hidden_size=HIDDEN, max_position_embeddings=40, pad_token_id=1, **SMALL)
    base.update(extra)
    return base


def gemma_text(**extra):
    # hidden 24: sqrt(24) = 4.89898 is not a bf16 value (4.90625 is), so the rounding is tested.
    return dict(vocab_size=VOCAB, hidden_size=24, num_key_value_heads=1, head_dim=8, max_position_embeddings=64,
                pad_token_id=0, **SMALL, **extra)


# name: (model class, config class, config kwargs, dtype, save format, first-layer path or
#        ("output", module path), positions decoder (records a continuation), token types)
CASES = {
    "gpt2": ("GPT2LMHeadModel", "GPT2Config", dict(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=1, n_head=2, n_positions=40,
                                                   pad_token_id=0), torch.float32, "bin", "transformer.h.0", True, False),
    "gptj": ("GPTJForCausalLM", "GPTJConfig", dict(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=1, n_head=2, rotary_dim=4,
                                                   n_positions=40, pad_token_id=0), torch.float16, "st", "transformer.h.0", False, False),
    "gpt_neox": ("GPTNeoXForCausalLM", "GPTNeoXConfig", dict(vocab_size=VOCAB, hidden_size=HIDDEN, **SMALL, max_position_embeddings=40,
                                                             pad_token_id=0), torch.float16, "st", "gpt_neox.layers.0", False, False),
    "opt": ("OPTForCausalLM", "OPTConfig", dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=1, num_attention_heads=2,
                                                ffn_dim=32, max_position_embeddings=40, word_embed_proj_dim=HIDDEN, pad_token_id=1),
            torch.float16, "bin", "model.decoder.layers.0", True, False),
    "opt_350m_like": ("OPTForCausalLM", "OPTConfig", dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=1,
                                                          num_attention_heads=2, ffn_dim=32, max_position_embeddings=40,
                                                          word_embed_proj_dim=8, pad_token_id=1, do_layer_norm_before=False),
                      torch.float16, "st", "model.decoder.layers.0", True, False),
    "bloom": ("BloomForCausalLM", "BloomConfig", dict(vocab_size=VOCAB, hidden_size=HIDDEN, n_layer=1, n_head=2, pad_token_id=3),
              torch.bfloat16, "st", "transformer.h.0", False, False),
    "falcon": ("FalconForCausalLM", "FalconConfig", dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=1,
                                                         num_attention_heads=2, pad_token_id=0), torch.bfloat16, "st",
               "transformer.h.0", False, False),
    "mpt": ("MptForCausalLM", "MptConfig", dict(vocab_size=VOCAB, d_model=HIDDEN, n_layers=1, n_heads=2, max_seq_len=40,
                                                pad_token_id=0), torch.bfloat16, "st", "transformer.blocks.0", False, False),
    "phi": ("PhiForCausalLM", "PhiConfig", dict(vocab_size=VOCAB, hidden_size=HIDDEN, **SMALL, max_position_embeddings=40,
                                                pad_token_id=0), torch.float16, "st", "model.layers.0", False, False),
    "phi3": ("Phi3ForCausalLM", "Phi3Config", llama_like(None), torch.bfloat16, "st", "model.layers.0", False, False),
    "llama": ("LlamaForCausalLM", "LlamaConfig", llama_like(None), torch.bfloat16, "sharded", "model.layers.0", False, False),
    "llama_base": ("LlamaModel", "LlamaConfig", llama_like(None), torch.bfloat16, "st", "layers.0", False, False),
    "mistral": ("MistralForCausalLM", "MistralConfig", llama_like(None), torch.bfloat16, "st", "model.layers.0", False, False),
    "mixtral": ("MixtralForCausalLM", "MixtralConfig", llama_like(None, num_local_experts=2, num_experts_per_tok=1),
                torch.bfloat16, "st", "model.layers.0", False, False),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config", llama_like(None), torch.bfloat16, "st", "model.layers.0", False, False),
    "qwen3": ("Qwen3ForCausalLM", "Qwen3Config", llama_like(None, head_dim=8), torch.bfloat16, "st", "model.layers.0", False, False),
    "gemma": ("GemmaForCausalLM", "GemmaConfig", gemma_text(), torch.bfloat16, "st", "model.layers.0", False, False),
    "gemma2": ("Gemma2ForCausalLM", "Gemma2Config", gemma_text(), torch.bfloat16, "st", "model.layers.0", False, False),
    "gemma3_text": ("Gemma3ForCausalLM", "Gemma3TextConfig", gemma_text(), torch.bfloat16, "st", "model.layers.0", False, False),
    "gemma3": ("Gemma3ForConditionalGeneration", "Gemma3Config", None, torch.bfloat16, "st",
               "model.language_model.layers.0", False, False),
    "bert": ("BertForMaskedLM", "BertConfig", bert_like(type_vocab_size=2, pad_token_id=0), torch.float32, "bin",
             "bert.encoder.layer.0", False, True),
    "roberta": ("RobertaForMaskedLM", "RobertaConfig", bert_like(type_vocab_size=1), torch.float32, "st",
                "roberta.encoder.layer.0", False, False),
    "xlm_roberta": ("XLMRobertaModel", "XLMRobertaConfig", bert_like(type_vocab_size=2), torch.float32, "st",
                    "encoder.layer.0", False, True),
    "camembert": ("CamembertModel", "CamembertConfig", bert_like(type_vocab_size=1), torch.float32, "st",
                  "encoder.layer.0", False, False),
    "mpnet": ("MPNetModel", "MPNetConfig", bert_like(), torch.float32, "st", "encoder.layer.0", False, False),
    "distilbert": ("DistilBertModel", "DistilBertConfig", dict(vocab_size=VOCAB, dim=HIDDEN, n_layers=1, n_heads=2,
                                                               hidden_dim=32, max_position_embeddings=40, pad_token_id=0),
                   torch.float32, "st", "transformer.layer.0", False, False),
    "electra": ("ElectraModel", "ElectraConfig", bert_like(embedding_size=8, type_vocab_size=2, pad_token_id=0),
                torch.float32, "st", ("output", "embeddings"), False, True),
    "albert": ("AlbertModel", "AlbertConfig", bert_like(embedding_size=8, type_vocab_size=2, pad_token_id=0),
               torch.float32, "st", ("output", "embeddings"), False, True),
    "deberta_v2": ("DebertaV2Model", "DebertaV2Config", bert_like(position_biased_input=False, type_vocab_size=0,
                                                                  relative_attention=True, pos_att_type=["p2c", "c2p"],
                                                                  pad_token_id=0),
                   torch.float32, "st", "encoder.layer.0", False, False),
    "deberta_v2_abs": ("DebertaV2Model", "DebertaV2Config", bert_like(position_biased_input=True, type_vocab_size=2,
                                                                      pad_token_id=0),
                       torch.float32, "st", "encoder.layer.0", False, True),
    "modernbert": ("ModernBertModel", "ModernBertConfig", dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=1,
                                                               num_attention_heads=2, intermediate_size=32, norm_bias=False,
                                                               pad_token_id=0, max_position_embeddings=64),
                   torch.float32, "st", "layers.0", False, False),
    "modernbert_bias": ("ModernBertModel", "ModernBertConfig", dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=1,
                                                                    num_attention_heads=2, intermediate_size=32, norm_bias=True,
                                                                    pad_token_id=0, max_position_embeddings=64),
                        torch.float32, "st", "layers.0", False, False),
    "t5": ("T5ForConditionalGeneration", "T5Config", dict(vocab_size=VOCAB, d_model=HIDDEN, d_kv=8, d_ff=32, num_layers=1,
                                                          num_heads=2, pad_token_id=0, decoder_start_token_id=0),
           torch.float32, "st", "encoder.block.0", False, False),
    "bart": ("BartForConditionalGeneration", "BartConfig", dict(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=1, decoder_layers=1,
                                                                encoder_attention_heads=2, decoder_attention_heads=2,
                                                                encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=40,
                                                                scale_embedding=True, pad_token_id=1),
             torch.float32, "st", "model.encoder.layers.0", False, False),
    "mbart": ("MBartForConditionalGeneration", "MBartConfig", dict(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=1, decoder_layers=1,
                                                                   encoder_attention_heads=2, decoder_attention_heads=2,
                                                                   encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=40,
                                                                   scale_embedding=True, pad_token_id=1),
              torch.float32, "st", "model.encoder.layers.0", False, False),
    "whisper": ("WhisperForConditionalGeneration", "WhisperConfig", dict(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=1,
                                                                         decoder_layers=1, encoder_attention_heads=2,
                                                                         decoder_attention_heads=2, encoder_ffn_dim=32,
                                                                         decoder_ffn_dim=32, num_mel_bins=8, max_source_positions=16,
                                                                         max_target_positions=40, pad_token_id=0,
                                                                         decoder_start_token_id=1),
                torch.float32, "st", "model.decoder.layers.0", True, False),
    "clip": ("CLIPTextModel", "CLIPTextConfig", dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=1,
                                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=40,
                                                     pad_token_id=0, eos_token_id=2),
             torch.float32, "st", "encoder.layers.0", False, False),
}

DTYPE_NAMES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def make_config(name, config_class, kwargs):
    if name == "gemma3":
        return tf.Gemma3Config(text_config=gemma_text(), vision_config=dict(hidden_size=16, intermediate_size=32,
                                                                             num_hidden_layers=1, num_attention_heads=2,
                                                                             image_size=32, patch_size=16),
                               mm_tokens_per_image=4, image_token_index=VOCAB - 2, boi_token_index=VOCAB - 3,
                               eoi_token_index=VOCAB - 4)
    return getattr(tf, config_class)(**kwargs)


def randomize(model):
    """Non-trivial norms and biases so weight and bias handling is tested (default init is 1 and 0)."""
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("norm" in name.lower() or "ln" in name.lower()):
                base = 1.0 if name.endswith("weight") or name.endswith("gamma") else 0.0
                p.copy_((base + 0.2 * torch.randn(p.shape, generator=g)).to(p.dtype))


def pad_id(config):
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    pad = getattr(text, "pad_token_id", None)
    return 0 if pad is None else pad


def sample_ids(config, paddingy):
    pad = pad_id(config)
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(3, VOCAB - 5, (2, L), generator=g)
    ids[0, 0] = 0 if pad != 0 else 4
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
    """Runs call() and returns the tensor the hooked module receives (or, for ("output", path), returns)."""
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
    return got[0].detach().contiguous(), result


def run_record(tensor, ids, types, start):
    raw = tensor.view(BITS[tensor.dtype]).numpy().tobytes()
    return {"input_ids": ids.tolist(), "token_type_ids": None if types is None else types.tolist(), "start": start,
            "output_dtype": DTYPE_NAMES[tensor.dtype], "shape": list(tensor.shape), "output_hex": raw.hex()}


def generate(name, out_dir):
    model_class, config_class, kwargs, dtype, fmt, where, continuation, token_types = CASES[name]
    torch.manual_seed(sum(map(ord, name)))
    config = make_config(name, config_class, kwargs)
    model = getattr(tf, model_class)(config).to(dtype).eval()
    randomize(model)
    paddingy = name in ("roberta", "xlm_roberta", "camembert", "mpnet")
    ids = sample_ids(config, paddingy)
    types = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [0, 1, 0, 1, 0, 1, 0]]) if token_types else None
    runs = []
    encoder_decoder = name in ("t5", "bart", "mbart")

    def forward(**extra):
        args = dict(input_ids=ids, **extra)
        if types is not None:
            args["token_type_ids"] = types
        if encoder_decoder:
            args["decoder_input_ids"] = ids[:, :2]
        if name == "gemma3":
            return model.model(**args)
        return model(**args)

    if name == "whisper":
        features = torch.randn(2, 8, 32, dtype=dtype, generator=torch.Generator().manual_seed(3))
        t, _ = capture(model, where, lambda: model(input_features=features, decoder_input_ids=ids))
        runs.append(run_record(t, ids, None, 0))
        start = 5
        prefix = torch.randint(3, VOCAB - 5, (2, start), generator=torch.Generator().manual_seed(9))
        with torch.no_grad():
            first = model(input_features=features, decoder_input_ids=prefix, use_cache=True)
        t, _ = capture(model, where, lambda: model(encoder_outputs=(first.encoder_last_hidden_state,), decoder_input_ids=ids,
                                                   past_key_values=first.past_key_values, use_cache=True))
        runs.append(run_record(t, ids, None, start))
    else:
        t, _ = capture(model, where, forward)
        runs.append(run_record(t, ids, types, 0))
        if continuation:
            start = 5
            prefix = torch.randint(3, VOCAB - 5, (2, start), generator=torch.Generator().manual_seed(9))
            cont = ids[:, :4].clone()
            cont[cont == pad_id(config)] = 5  # a real decoder continues without padding
            with torch.no_grad():
                first = model(input_ids=prefix, use_cache=True)
            t, _ = capture(model, where, lambda: model(input_ids=cont, past_key_values=first.past_key_values, use_cache=True))
            runs.append(run_record(t, cont, None, start))

    case = os.path.join(out_dir, name)
    shutil.rmtree(case, ignore_errors=True)
    model_dir = os.path.join(case, "model")
    if fmt == "sharded":
        model.save_pretrained(model_dir, max_shard_size="8KB")
    else:
        model.save_pretrained(model_dir, safe_serialization=(fmt != "bin"))
    for extra in os.listdir(model_dir):
        if extra == "generation_config.json":
            os.unlink(os.path.join(model_dir, extra))
    doc = {"case": name, "model_type": config.model_type, "architecture": model_class,
           "torch_dtype": str(dtype).replace("torch.", ""),
           "captured": f"{where[1]} output" if isinstance(where, tuple) else f"input of {where}",
           "versions": {"torch": torch.__version__.split("+")[0], "transformers": tf.__version__},
           "runs": runs}
    with open(os.path.join(case, "expected.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true", help="regenerate into a temporary folder and compare")
    parser.add_argument("cases", nargs="*", help="only these cases")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    names = args.cases or list(CASES)
    committed = os.path.join(HERE, "cases")
    out = tempfile.mkdtemp(prefix="embedrt-hf-") if args.check else committed
    failed = []
    for name in names:
        try:
            generate(name, out)
            print("generated", name, file=sys.stderr)
        except Exception as e:  # report every case, then fail
            failed.append(name)
            print(f"FAILED {name}: {type(e).__name__}: {e}", file=sys.stderr)
    if args.check:
        mismatches = []
        for name in names:
            for root, _, files in os.walk(os.path.join(out, name)):
                for f in files:
                    mine = os.path.join(root, f)
                    theirs = os.path.join(committed, os.path.relpath(mine, out))
                    if not os.path.exists(theirs) or not filecmp.cmp(mine, theirs, shallow=False):
                        mismatches.append(os.path.relpath(mine, out))
        for m in mismatches:
            print("DIFFERS", m)
        print(f"{len(names) - len(failed)} regenerated, {len(mismatches)} files differ from the committed ones")
        shutil.rmtree(out, ignore_errors=True)
        failed += mismatches
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
