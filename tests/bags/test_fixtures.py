"""The committed bag fixtures agree with the written-out rules, without torch or model2vec installed.

generate.py recorded torch's and model2vec's own outputs and checked them against bag_rules.py and
m2v_rules.py while generating. This re-reads what is committed (tables and models through a small
safetensors reader, manifests) and recomputes every recorded output from the rules, so a damaged
file, a hand edit of a manifest or a change to the rules that no longer describes the references
fails here (ctest bags.fixtures). It is also the harness an embedrt parity test can copy: swap the
rules call for the CLI's output.

usage: test_fixtures.py [BAGS_DIR]
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from tally import Tally  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bag_rules  # noqa: E402
import m2v_rules  # noqa: E402

ROOT = sys.argv[1] if len(sys.argv) > 1 else HERE
KINDS = {"F16": np.float16, "BF16": np.uint16, "F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


tally = Tally()
check = tally.check


def read_safetensors(path):
    """{name: array} (bf16 as its uint16 bit patterns)."""
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + lo:8 + n + hi], dtype=KINDS[info["dtype"]]).reshape(info["shape"])
    return out


def table_bits(arr, dtype):
    return arr.view({"f32": np.uint32, "f16": np.uint16, "bf16": np.uint16}[dtype])


def test_embedding_bag():
    root = os.path.join(ROOT, "embedding_bag")
    manifest = json.load(open(os.path.join(root, "manifest.json")))
    tables = {t["name"]: t for t in manifest["tables"]}
    loaded = {}
    for name, t in tables.items():
        w = read_safetensors(os.path.join(root, t["safetensors"]))[t["tensor"]]
        check(f"{name}: shape", list(w.shape) == t["shape"], w.shape)
        loaded[name] = table_bits(w, t["dtype"])
        check(f"{name}: state dict present", os.path.getsize(os.path.join(root, t["state_dict"])) > w.nbytes)
    paths = set()
    for i, c in enumerate(manifest["cases"]):
        paths.add(c["path"])
        mine = bag_rules.embedding_bag(loaded[c["table"]], c["output_dtype"], c["mode"], c["indices"], c["offsets"],
                                       c["include_last_offset"], c["per_sample_weights"], c["padding_idx"])
        kind = np.uint32 if c["output_dtype"] == "f32" else np.uint16
        want = np.frombuffer(bytes.fromhex(c["output_hex"]), dtype=kind).reshape(c["shape"])
        check(f"embedding_bag case {i} ({c['table']} {c['mode']} {c['path']}): every bit",
              mine.shape == want.shape and np.array_equal(mine, want),
              f"{np.count_nonzero(mine != want) if mine.shape == want.shape else mine.shape} elements differ")
    check("embedding_bag: both torch paths covered", paths == {"fbgemm", "loop"}, paths)
    for alt, e in manifest["alternatives_rejected"].items():
        check(f"embedding_bag: '{alt}' was told apart", e["outputs_that_differ"] > 0, e)


class Loaded:
    """What m2v_rules needs of a static model, read from its folder with no model2vec."""

    def __init__(self, folder):
        t = read_safetensors(os.path.join(folder, "model.safetensors"))
        self.embedding = t["embeddings"]
        self.weights = t.get("weights")
        self.token_mapping = t.get("mapping")


def test_model2vec():
    root = os.path.join(ROOT, "model2vec")
    manifest = json.load(open(os.path.join(root, "manifest.json")))
    check("model2vec: both models", set(manifest["models"]) == {"plain", "quantized"}, manifest["models"].keys())
    for name, m in manifest["models"].items():
        folder = os.path.join(root, m["folder"])
        config = json.load(open(os.path.join(folder, "config.json")))
        check(f"{name}: config", config["model_type"] == "model2vec" and config["normalize"] is True and
              config["pooling"] == "mean", config)
        model = Loaded(folder)
        check(f"{name}: table", list(model.embedding.shape) == m["embedding_shape"], model.embedding.shape)
        check(f"{name}: weights and mapping as recorded",
              (model.weights is None) == (m["weights"] is None) and
              (model.token_mapping is None) == (m["token_mapping"] is None))
        for r in m["runs"]:
            mine = m2v_rules.encode(model.embedding, model.weights, model.token_mapping, r["ids"], r["normalize"])
            want = np.frombuffer(bytes.fromhex(r["output_hex"]), dtype=np.uint16).reshape(r["shape"])
            check(f"{name} max_length {r['max_length']}: every bit of StaticModel.encode",
                  np.array_equal(mine.view(np.uint16), want), f"{np.count_nonzero(mine.view(np.uint16) != want)} differ")


def main():
    test_embedding_bag()
    test_model2vec()
    tally.finish()


if __name__ == "__main__":
    main()
