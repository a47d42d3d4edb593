"""embedrt's pooling against torch's EmbeddingBag and model2vec's StaticModel.encode themselves.

tests/bags holds what the references computed (raw bits, with their inputs) and how (README.md).
This converts every recorded table and model with `embedrt convert` and pools the recorded ids
with `embedrt pool`, then compares:

  EmbeddingBag, torch's FBGEMM path (no padding_idx; what a converted state dict is):
    f32 tables, sum / mean / max, weighted or not: every bit.
    f16 and bf16 tables: sum and max every bit (bf16 sums: ties excepted, below); within 1 ulp of
    the output dtype where torch rounds differently: its mean rounds the sum to the 16-bit dtype
    and then divides (two roundings; embedrt rounds the mean once), and FBGEMM rounds a bf16
    output half away from zero on the bit pattern (embedrt: to nearest even).
  EmbeddingBag, torch's loop path (cases with a padding_idx): the padded ids dropped, within 1 ulp
    (torch rounds a weighted f32 product before adding it there; embedrt fuses it as FBGEMM does).
  model2vec plain (mean of f16 rows, normalized): every bit of encode, for every recorded run.
  model2vec quantized (rows through `mapping`, f64 weights): within 1 f16 ulp (model2vec sums the
    weighted rows in f64; embedrt in f32 with the weights rounded to f32).

Every comparison is counted; the summary prints how many were bit-exact. Exit 1 on any failure.

usage: test_parity.py EMBEDRT_CLI [BAGS_DIR]
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

CLI = os.path.abspath(sys.argv[1])
ROOT = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(os.path.abspath(__file__))
WORK = tempfile.mkdtemp(prefix="embedrt-bags-")
BITS = {"f32": np.uint32, "f16": np.uint16, "bf16": np.uint16}
exact, within = 0, 0


tally = Tally()
check = tally.check


def run(*args):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)


def bits_of(values, dtype):
    """The CLI prints decoded floats (shortest round trip of each f32): back to the dtype's bits."""
    f = np.array(values, dtype=np.float64).astype(np.float32)
    if dtype == "f32":
        return f.view(np.uint32)
    if dtype == "f16":
        return f.astype(np.float16).view(np.uint16)
    return (f.view(np.uint32) >> 16).astype(np.uint16)


def ordered(bits, dtype):
    """Bit patterns as integers whose difference counts units in the last place (sign folded)."""
    b = bits.astype(np.int64)
    top = 1 << (31 if dtype == "f32" else 15)
    return np.where(b >= top, top - b, b)


def nan_mask(bits, dtype):
    if dtype == "f32":
        return (bits & 0x7FFFFFFF) > 0x7F800000
    if dtype == "f16":
        return (bits & 0x7FFF) > 0x7C00
    return (bits & 0x7FFF) > 0x7F80


def compare(name, mine, want, dtype, ulps):
    """Every bit (NaN as NaN), or within `ulps` units in the last place of the dtype."""
    global exact, within
    if mine.shape != want.shape:
        check(name, False, f"shape {mine.shape} != {want.shape}")
        return
    both_nan = nan_mask(mine, dtype) & nan_mask(want, dtype)
    same = (mine == want) | both_nan
    if same.all():
        exact += 1
        check(name, True)
        return
    distance = np.abs(ordered(mine, dtype) - ordered(want, dtype))
    distance[both_nan] = 0
    worst = int(distance.max())
    if worst <= ulps:
        within += 1
    check(f"{name} (within {ulps} ulp)", worst <= ulps, f"{np.count_nonzero(~same)} elements differ, by up to {worst} ulp")


def pool(model, ids, bounds, mode=None, weights=None, extra=()):
    args = ["pool", model, "--ids", ",".join(map(str, ids)), "--offsets", ",".join(map(str, bounds)), "--json", *extra]
    if mode:
        args += ["--mode", mode]
    if weights is not None:
        args += ["--weights", ",".join(repr(float(w)) for w in weights)]
    return run(*args)


def embedding_bag():
    root = os.path.join(ROOT, "embedding_bag")
    manifest = json.load(open(os.path.join(root, "manifest.json")))
    models = {}
    for t in manifest["tables"]:
        out = os.path.join(WORK, t["name"] + ".embt")
        # The state dict needs the pooling it was trained with; the mode is given per request.
        c = run("convert", os.path.join(root, t["state_dict"]), "-o", out, "--pooling", "sum", "-q")
        check(f"{t['name']}: the torch.save'd EmbeddingBag state dict converts", c.returncode == 0, c.stderr)
        models[t["name"]] = out
        st = run("convert", os.path.join(root, t["safetensors"]), "-o", out + ".st.embt", "--pooling", "sum", "-q",
                 "--force")
        check(f"{t['name']}: the safetensors file converts", st.returncode == 0, st.stderr)
    for i, case in enumerate(manifest["cases"]):
        ids, offsets = case["indices"], list(case["offsets"])
        bounds = offsets if case["include_last_offset"] else offsets + [len(ids)]
        weights = case["per_sample_weights"]
        if case["padding_idx"] is not None:  # torch skips the padding id: drop it, shift the boundaries
            keep = [k for k, x in enumerate(ids) if x != case["padding_idx"]]
            bounds = [sum(1 for k in keep if k < b) for b in bounds]
            ids = [ids[k] for k in keep]
            weights = None if weights is None else [weights[k] for k in keep]
        r = pool(models[case["table"]], ids, bounds, case["mode"], weights)
        name = f"embedding_bag case {i} ({case['table']}, {case['mode']}, {case['path']}" + \
               (", weighted" if weights is not None else "") + ")"
        if r.returncode != 0:
            check(name, False, r.stderr)
            continue
        dtype = case["output_dtype"]
        mine = bits_of(json.loads(r.stdout)["data"], dtype)
        want = np.frombuffer(bytes.fromhex(case["output_hex"]), dtype=BITS[dtype])
        exact_expected = case["path"] == "fbgemm" and (dtype == "f32" or case["mode"] == "max" or
                                                       (dtype == "f16" and case["mode"] == "sum"))
        compare(name, mine, want, dtype, 0 if exact_expected else 1)


def model2vec():
    root = os.path.join(ROOT, "model2vec")
    manifest = json.load(open(os.path.join(root, "manifest.json")))
    for name, m in manifest["models"].items():
        out = os.path.join(WORK, "m2v_" + name + ".embt")
        c = run("convert", os.path.join(root, m["folder"]), "-o", out, "-q")
        check(f"model2vec {name}: converts from its folder", c.returncode == 0, c.stderr)
        if c.returncode != 0:
            continue
        for r in m["runs"]:
            bounds = [0]
            for sentence in r["ids"]:
                bounds.append(bounds[-1] + len(sentence))
            ids = [i for sentence in r["ids"] for i in sentence]
            # The model's own defaults: mean, normalized (config.json), f16 output (its table dtype).
            p = pool(out, ids, bounds, extra=() if r["normalize"] else ("--no-normalize",))
            label = f"model2vec {name} max_length {r['max_length']}: StaticModel.encode"
            if p.returncode != 0:
                check(label, False, p.stderr)
                continue
            mine = bits_of(json.loads(p.stdout)["data"], "f16")
            want = np.frombuffer(bytes.fromhex(r["output_hex"]), dtype=np.uint16)
            compare(label, mine, want, "f16", 0 if name == "plain" else 1)


def main():
    embedding_bag()
    model2vec()
    shutil.rmtree(WORK, ignore_errors=True)
    print(f"\n{exact} comparisons bit-exact, {within} within their ulp bound")
    tally.finish()


if __name__ == "__main__":
    main()
