"""Every model family against transformers itself, without transformers installed.

tests/hf/generate.py (run in the venv tools/setup-hf-venv.sh makes) saved tiny random models of
real architectures with save_pretrained and recorded, as raw bits, what each model's own forward
feeds its first layer. This converts each committed folder with `embedrt convert` (recipe chosen
from config.json alone), embeds the recorded ids with `embedrt embed` (output dtype: the model's
own), and compares every output element:
- families whose embedding is a gather, an add and a multiply: every bit;
- LayerNorm families and folded projections: within the bound stated below, in units in the last
  place of the output dtype (ulp), and the measured maximum is printed for the README's table.
It also plays the refusals: unknown model_type, names that fit several families, a config that
contradicts the tensors, a preset that contradicts the config, unsupported position kinds.

usage: test_hf_parity.py EMBEDRT_CLI CASES_DIR
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from tally import Tally  # noqa: E402

CLI, CASES = sys.argv[1], sys.argv[2]
WORK = tempfile.mkdtemp(prefix="embedrt-hf-")

# Largest difference allowed. 0: bit-exact, every element. Otherwise in ulps of the output dtype
# at the row's scale (the spacing of the dtype at the row's largest magnitude): LayerNorm's
# float32 reductions run in another order than torch's, so values near zero may differ by many
# of their own ulps while the error is a few ulps of the row. A folded projection is computed in
# f64 and rounded once, where torch rounds an f16 matmul.
LAYER_NORM_ULPS = 4
BOUNDS = {
    "bloom": LAYER_NORM_ULPS, "bert": LAYER_NORM_ULPS, "roberta": LAYER_NORM_ULPS, "xlm_roberta": LAYER_NORM_ULPS,
    "camembert": LAYER_NORM_ULPS, "mpnet": LAYER_NORM_ULPS, "distilbert": LAYER_NORM_ULPS,
    "electra": LAYER_NORM_ULPS, "albert": LAYER_NORM_ULPS, "deberta_v2": LAYER_NORM_ULPS,
    "deberta_v2_abs": LAYER_NORM_ULPS, "modernbert": LAYER_NORM_ULPS, "modernbert_bias": LAYER_NORM_ULPS,
    "bart": LAYER_NORM_ULPS, "mbart": LAYER_NORM_ULPS, "opt_350m_like": 1,
}


tally = Tally()
check = tally.check


def run(*args):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)


def ordered(bits, width):
    """Maps float bit patterns to integers whose difference counts ulps across zero."""
    bits = bits.astype(np.int64)
    sign = np.int64(1) << (width - 1)
    return np.where(bits & sign, sign - bits, bits + sign)


def expected_bits(run_doc):
    raw = bytes.fromhex(run_doc["output_hex"])
    width = 32 if run_doc["output_dtype"] == "f32" else 16
    return np.frombuffer(raw, dtype=np.uint32 if width == 32 else np.uint16), width


def as_float(bits, dtype):
    if dtype == "f32":
        return bits.view(np.float32).astype(np.float64)
    if dtype == "f16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def row_scale_ulps(mine, want, dtype, dim):
    """|mine - want| in units of the dtype's spacing at each row's largest magnitude."""
    a, b = as_float(mine, dtype).reshape(-1, dim), as_float(want, dtype).reshape(-1, dim)
    mantissa = {"f32": 23, "f16": 10, "bf16": 7}[dtype]
    scale = np.maximum(np.abs(b).max(axis=1, keepdims=True), np.finfo(np.float32).tiny)
    unit = np.exp2(np.floor(np.log2(scale)) - mantissa)
    return (np.abs(a - b) / unit).flatten()


def got_bits(values, dtype):
    f = np.array(values, dtype=np.float64).astype(np.float32)
    if dtype == "f32":
        return f.view(np.uint32)
    if dtype == "f16":
        return f.astype(np.float16).view(np.uint16)  # exact: the values are f16 values
    return (f.view(np.uint32) >> 16).astype(np.uint16)  # bf16: the upper half, exact


def convert(case_dir, out, *extra):
    return run("convert", os.path.join(case_dir, "model"), "-o", out, "--force", "--no-progress", *extra)


def embed(model, r):
    ids = np.array(r["input_ids"])
    args = ["embed", model, "--ids", ",".join(map(str, ids.flatten())), "--batch", ids.shape[0],
            "--start", r.get("start", 0), "--json"]
    if r.get("token_type_ids") is not None:
        args += ["--segments", ",".join(map(str, np.array(r["token_type_ids"]).flatten()))]
    return run(*args)


def test_case(name, case_dir, table):
    doc = json.load(open(os.path.join(case_dir, "expected.json")))
    out = os.path.join(WORK, name + ".embt")
    c = convert(case_dir, out)
    check(f"{name}: converts from config.json alone", c.returncode == 0, c.stderr)
    if c.returncode != 0:
        return
    recipe = c.stdout.splitlines()[0]
    bound = BOUNDS.get(name, 0)
    worst = 0
    for i, r in enumerate(doc["runs"]):
        e = embed(out, r)
        check(f"{name} run {i}: embeds", e.returncode == 0, e.stderr)
        if e.returncode != 0:
            continue
        got = json.loads(e.stdout)
        check(f"{name} run {i}: shape", got["shape"] == r["shape"], (got["shape"], r["shape"]))
        want, width = expected_bits(r)
        mine = got_bits(got["data"], r["output_dtype"])
        if mine.shape != want.shape:
            check(f"{name} run {i}: element count", False, (mine.shape, want.shape))
            continue
        if bound == 0:
            ulps = np.abs(ordered(mine, width) - ordered(want, width))
        else:
            ulps = row_scale_ulps(mine, want, r["output_dtype"], r["shape"][-1])
        worst = max(worst, float(ulps.max()) if ulps.size else 0)
        check(f"{name} run {i}: within {bound} ulp of transformers", ulps.max() <= bound,
              f"max {ulps.max():g} ulp at {int(ulps.argmax())} of {ulps.size}; {np.count_nonzero(ulps)} differ")
    # The provenance stored in the file names the recipe and the config values it read.
    ins = run("inspect", out, "--json")
    meta = json.loads(ins.stdout)["metadata"] if ins.returncode == 0 else {}
    check(f"{name}: provenance in the file", meta.get("config.model_type") == doc["model_type"] and
          "recipe.name" in meta and "recipe.evidence" in meta, meta)
    measured = "bit-exact" if worst == 0 else f"{worst:g} ulp"
    table.append((name, doc["architecture"], doc["torch_dtype"], r["output_dtype"], recipe.split(" ")[1], measured,
                  "bit-exact" if bound == 0 else f"{bound} ulp (row scale)"))


def copy_case(case, edit_config=None):
    dst = os.path.join(WORK, "edited", case)
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(os.path.join(CASES, case), dst)
    if edit_config:
        path = os.path.join(dst, "model", "config.json")
        config = json.load(open(path))
        edit_config(config)
        json.dump(config, open(path, "w"))
    return dst


def refused(name, result, *needles, code=3):
    """Bad input exits 3, a contradictory command line 2; the message names what would settle it."""
    ok = result.returncode == code and all(n in result.stderr for n in needles)
    check(f"refusal: {name}", ok, f"exit {result.returncode}: {result.stderr or result.stdout}")


def test_refusals():
    out = os.path.join(WORK, "refused.embt")
    unknown = copy_case("llama", lambda c: c.update(model_type="tiny_future_lm"))
    refused("unknown model_type", convert(unknown, out), "model_type 'tiny_future_lm'", "has no recipe", "gemma",
            "--ignore-config")
    refused("llama names without config fit llama and gemma", convert(os.path.join(CASES, "llama"), out, "--ignore-config"),
            "llama:", "gemma:", "--preset")
    refused("bert-like names without config", convert(os.path.join(CASES, "xlm_roberta"), out, "--ignore-config"),
            "bert:", "roberta:", "--preset")
    vocab = copy_case("gpt2", lambda c: c.update(vocab_size=c["vocab_size"] + 1))
    refused("config vocab_size contradicts the table", convert(vocab, out), "vocab_size is", "rows", "--config",
            "--ignore-config")
    width = copy_case("bert", lambda c: c.update(hidden_size=c["hidden_size"] * 2))
    refused("config hidden_size contradicts the table", convert(width, out), "hidden_size is", "wide")
    refused("preset contradicts config.json", convert(os.path.join(CASES, "llama"), out, "--preset", "gemma"),
            "--preset gemma contradicts", "model_type 'llama'", code=2)
    relative = copy_case("bert", lambda c: c.update(position_embedding_type="relative_key"))
    refused("relative position embeddings", convert(relative, out), "position_embedding_type 'relative_key'")
    deberta = copy_case("deberta_v2", lambda c: c.update(embedding_size=c["hidden_size"] // 2))
    refused("deberta-v2 with embedding_size != hidden_size", convert(deberta, out), "embedding_size", "not supported")
    check("no output left by refusals", not os.path.exists(out))
    # Settled the ways the messages say: an explicit preset plans from names alone, exactly.
    ok = convert(os.path.join(CASES, "gemma"), out, "--ignore-config", "--preset", "gemma")
    check("gemma from names with --preset", ok.returncode == 0 and "applied as" in run("inspect", out).stdout, ok.stderr)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_native_dtype(case):
    """`embedrt serve` answers in the model's own dtype (BF16 on the wire for a bf16 model)."""
    doc = json.load(open(os.path.join(CASES, case, "expected.json")))
    r = doc["runs"][0]
    model = os.path.join(WORK, case + "-serve.embt")
    if convert(os.path.join(CASES, case), model).returncode != 0:
        return check(f"serve {case}: convert", False)
    port = free_port()
    proc = subprocess.Popen([CLI, "serve", model, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                urllib.request.urlopen(url + "/v2/health/ready", timeout=1)
                break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.05)
        ids = np.array(r["input_ids"])
        body = json.dumps({"inputs": [{"name": "input_ids", "shape": list(ids.shape), "datatype": "INT64",
                                       "data": ids.flatten().tolist()}]}).encode()
        name = os.path.basename(model)[:-len(".embt")]
        reply = json.loads(urllib.request.urlopen(urllib.request.Request(f"{url}/v2/models/{name}/infer", data=body),
                                                  timeout=10).read())
        out = reply["outputs"][0]
        want_type = {"bf16": "BF16", "f16": "FP16", "f32": "FP32"}[r["output_dtype"]]
        check(f"serve {case}: datatype {want_type}", out["datatype"] == want_type, out["datatype"])
        want, _ = expected_bits(r)
        check(f"serve {case}: every bit of transformers' output",
              np.array_equal(got_bits(out["data"], r["output_dtype"]), want))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)


def is_multi_output(name):
    """Cases with several named outputs (Gemma 3n, issue 13) record "outputs" per run; they are
    compared by test_hf_multi_output.py, not here."""
    return "outputs" in json.load(open(os.path.join(CASES, name, "expected.json")))


def main():
    cases = sorted(d for d in os.listdir(CASES) if os.path.isfile(os.path.join(CASES, d, "expected.json")))
    multi = [c for c in cases if is_multi_output(c)]
    if multi:
        print("several outputs, compared by test_hf_multi_output.py:", ", ".join(multi))
    cases = [c for c in cases if c not in multi]
    check("fixtures present", len(cases) >= 30, cases)
    table = []
    for name in cases:
        test_case(name, os.path.join(CASES, name), table)
    test_refusals()
    test_serve_native_dtype("gemma")
    print("\n| case | architecture | weights | output | recipe | measured (all runs) | bound |")
    print("|---|---|---|---|---|---|---|")
    for row in table:
        print("| " + " | ".join(map(str, row)) + " |")
    shutil.rmtree(WORK, ignore_errors=True)
    tally.finish()


if __name__ == "__main__":
    main()
