"""A transformers model run on embeddings from embedrt gives the same logits as the model alone.

For each family below: build a tiny random model with transformers, save it as transformers
does (save_pretrained: config.json and safetensors), convert that folder with embedrt.convert,
then run the model twice on the same ids, once with input_ids (transformers looks the rows up
itself) and once with inputs_embeds from embedrt.torch.inputs_embeds, and compare the logits
bit for bit.

    python runtime/python/examples/transformers_inputs_embeds.py [--family llama|gemma3_text ...]

Needs torch and transformers (tools/setup-hf-venv.sh makes such a venv; tools/test.sh runs this
file through tests/python_package/test_torch.py). Exits 1 if any logits differ.
"""
import argparse
import sys
import tempfile
from pathlib import Path

import torch
import transformers

import embedrt
import embedrt.torch

# Small everything: two layers, two heads. Gemma's width 24 makes sqrt(24) a value that rounds
# (transformers multiplies the row by it inside Gemma3TextScaledWordEmbedding).
FAMILIES = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
              dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)),
    "gemma3_text": (transformers.Gemma3TextConfig, transformers.Gemma3ForCausalLM,
                    dict(vocab_size=128, hidden_size=24, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=64)),
}


def run(family, folder):
    config_class, model_class, sizes = FAMILIES[family]
    torch.manual_seed(0)
    hf_model = model_class(config_class(**sizes)).to(torch.float32).eval()
    hf_model.save_pretrained(folder / "hf")

    report = embedrt.convert(folder / "hf", folder / "model.embt")
    table = embedrt.Model(folder / "model.embt")
    vocab = sizes["vocab_size"]
    input_ids = torch.tensor([[1, 5, 9, vocab - 1, 17, 3, 2], [0, 7, 7, 7, 64, 100, vocab - 2]])
    with torch.no_grad():
        alone = hf_model(input_ids=input_ids).logits
        embeds = embedrt.torch.inputs_embeds(table, input_ids)
        from_embedrt = hf_model(inputs_embeds=embeds).logits
    same = torch.equal(alone, from_embedrt)
    print(f"{family}: recipe {report['recipe']} ({report['rules']}); inputs_embeds {tuple(embeds.shape)} "
          f"{embeds.dtype}; logits {tuple(alone.shape)} {'bit-exact' if same else 'DIFFER'}"
          + ("" if same else f" (max abs difference {(alone - from_embedrt).abs().max().item():.3g})"))
    return same


def main(argv=None):
    transformers.utils.logging.disable_progress_bar()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES), help="default: every family")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, embedrt {embedrt.__version__}")
    results = []
    for family in args.family or sorted(FAMILIES):
        with tempfile.TemporaryDirectory() as folder:
            results.append(run(family, Path(folder)))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
