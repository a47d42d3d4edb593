"""Models with several named outputs (Gemma 3n, issue 13) against transformers itself.

tests/hf/generate.py recorded, for gemma3n_text (Gemma3nForCausalLM) and gemma3n
(Gemma3nForConditionalGeneration), the bits of the language model's embed_tokens(ids) ("inputs_embeds",
[B, L, hidden_size]) and get_per_layer_inputs(ids) ("per_layer_inputs", [B, L, num_hidden_layers,
hidden_size_per_layer_input]) on ids that include 0, the last vocabulary row and ids past
vocab_size_per_layer_input (mapped to row 0 by the per-layer output). This converts each folder and
requires every bit of both outputs.

The CLI used:
  embedrt convert MODEL_DIR -o OUT.embt --force --no-progress
  embedrt embed OUT.embt --ids 1,2,3 --batch B --json --output NAME
      -> {"shape": [B, L, ...token_shape], "data": [...]}   (NAME: inputs_embeds | per_layer_inputs)
  embedrt inspect OUT.embt --json -> {"outputs": [{"name": ..., ...}, ...], ...}  (only the names are read)

Gemma3nForConditionalGeneration's forward replaces the inputs_embeds of ids from
vision_config.vocab_offset on (multimodal soft tokens) with its vision and audio towers' own
embeddings ("forward_fed_differs_at" in expected.json): the converter keeps only the text rows, so
embedrt refuses those ids for inputs_embeds, naming the limit; the text ids of those runs must
still match every bit, and per_layer_inputs (fed unchanged) is checked on the whole run.

usage: test_hf_multi_output.py EMBEDRT_CLI CASES_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from tally import Tally  # noqa: E402

CLI, CASES = sys.argv[1], sys.argv[2]
WORK = tempfile.mkdtemp(prefix="embedrt-hf-multi-")


tally = Tally()
check = tally.check


def run(*args):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)


def got_bits(values, dtype):
    f = np.array(values, dtype=np.float64).astype(np.float32)
    if dtype == "f32":
        return f.view(np.uint32)
    if dtype == "f16":
        return f.astype(np.float16).view(np.uint16)
    return (f.view(np.uint32) >> 16).astype(np.uint16)  # bf16 values are exact in f32: the upper half


def want_bits(rec):
    kind = np.uint32 if rec["output_dtype"] == "f32" else np.uint16
    return np.frombuffer(bytes.fromhex(rec["output_hex"]), dtype=kind)


def embed(model, ids, output):
    ids = np.array(ids)
    return run("embed", model, "--ids", ",".join(map(str, ids.flatten())), "--batch", ids.shape[0], "--json",
               "--output", output)


def soft_tokens(name, i, model, run_, rec, soft):
    """The wrapper's soft-token ids are refused for inputs_embeds; its text ids match transformers."""
    ids = np.array(run_["input_ids"])
    first = ids[soft[0][0], soft[0][1]]
    e = embed(model, ids, "inputs_embeds")
    check(f"{name} run {i} inputs_embeds: soft-token id {first} refused, naming the text vocabulary",
          e.returncode != 0 and f"id {first} is out of range [0, " in e.stderr, e.stderr)
    text = [(b, t) for b in range(ids.shape[0]) for t in range(ids.shape[1]) if [b, t] not in soft]
    e = embed(model, [[ids[b, t] for b, t in text]], "inputs_embeds")
    if e.returncode != 0:
        check(f"{name} run {i} inputs_embeds: text ids embed", False, e.stderr)
        return
    width = int(np.prod(rec["shape"][2:]))
    want = want_bits(rec).reshape(ids.shape[0], ids.shape[1], width)
    mine = got_bits(json.loads(e.stdout)["data"], rec["output_dtype"]).reshape(len(text), width)
    check(f"{name} run {i} inputs_embeds: every bit of transformers' output at the {len(text)} text ids",
          all(np.array_equal(mine[k], want[b, t]) for k, (b, t) in enumerate(text)))


def test_case(name):
    doc = json.load(open(os.path.join(CASES, name, "expected.json")))
    model = os.path.join(WORK, name + ".embt")
    c = run("convert", os.path.join(CASES, name, "model"), "-o", model, "--force", "--no-progress")
    check(f"{name}: converts from config.json alone", c.returncode == 0, c.stderr)
    if c.returncode != 0:
        return
    ins = run("inspect", model, "--json")
    names = [o.get("name") for o in json.loads(ins.stdout).get("outputs", [])] if ins.returncode == 0 else []
    check(f"{name}: inspect lists the outputs", names[:2] == [o["name"] for o in doc["outputs"]], names)
    for i, r in enumerate(doc["runs"]):
        soft = r.get("forward_fed_differs_at") or []
        for output, rec in r["outputs"].items():
            if output == "inputs_embeds" and soft:
                soft_tokens(name, i, model, r, rec, soft)
                continue
            e = embed(model, r["input_ids"], output)
            check(f"{name} run {i} {output}: embeds", e.returncode == 0, e.stderr)
            if e.returncode != 0:
                continue
            got = json.loads(e.stdout)
            check(f"{name} run {i} {output}: shape", got["shape"] == rec["shape"], (got["shape"], rec["shape"]))
            mine, want = got_bits(got["data"], rec["output_dtype"]), want_bits(rec)
            same = mine.shape == want.shape and np.array_equal(mine, want)
            check(f"{name} run {i} {output}: every bit of transformers' output", same,
                  f"{np.count_nonzero(mine != want) if mine.shape == want.shape else 'shape'} elements differ")
    # Negative ids: the per-layer rule maps them to row 0, but the main output refuses them, and a
    # request names both by default; only per_layer_inputs is asked for here.
    neg = doc["per_layer_inputs_of_negative_ids"]
    e = embed(model, neg["input_ids"], "per_layer_inputs")
    if e.returncode == 0:
        got = json.loads(e.stdout)
        check(f"{name}: negative ids map to row 0 in per_layer_inputs",
              np.array_equal(got_bits(got["data"], neg["output_dtype"]), want_bits(neg)))
    else:  # refusing negative ids outright is also a stated rule; it must say which id
        check(f"{name}: negative ids refused with a clear error", "-1" in e.stderr, e.stderr)


def main():
    cases = sorted(d for d in os.listdir(CASES) if os.path.isfile(os.path.join(CASES, d, "expected.json"))
                   and "outputs" in json.load(open(os.path.join(CASES, d, "expected.json"))))
    check("multi-output fixtures present", len(cases) >= 2, cases)
    for name in cases:
        test_case(name)
    shutil.rmtree(WORK, ignore_errors=True)
    tally.finish()


if __name__ == "__main__":
    main()
