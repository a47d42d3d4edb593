"""`embedrt convert` + `embedrt embed` against PyTorch itself.

Every fixture is written at test time by real torch.save (Debian's python3-torch, this file runs
under /usr/bin/python3) or by the real safetensors package (the PATH python3, installed by
tools/install-deps.sh). Expected values are computed by torch from the same modules.

Bounds, stated: f32 tables (from f32, f16, bf16 or f64 sources) match torch bit for bit; f16 and
bf16 tables match torch's own .half()/.bfloat16() rounding bit for bit; int8 rowwise stays within
half a quantization step per table (sum of (max - min) / 255 / 2 over the tables added);
LayerNorm (BERT, RoBERTa) within 1e-5 of torch.nn.LayerNorm.

usage: /usr/bin/python3 test_convert_parity.py EMBEDRT_CLI EXTERNAL_FIXTURES_DIR
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from tally import Tally  # noqa: E402

CLI, EXTERNAL = sys.argv[1], sys.argv[2]


tally = Tally()
check = tally.check


def run(*args):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)


def convert(name, inputs, *extra):
    out = os.path.join(WORK, name + ".embt")
    r = run("convert", *inputs, "-o", out, "--force", *extra)
    if r.returncode != 0:
        raise RuntimeError(f"convert {name} failed: {r.stderr}")
    return out, r.stdout


def embed(model, ids, start=0, segments=None):
    ids = torch.as_tensor(ids)
    args = ["embed", model, "--ids", ",".join(map(str, ids.flatten().tolist())), "--batch", ids.shape[0],
            "--start", start, "--json", "--out-dtype", "f32"]
    if segments is not None:
        args += ["--segments", ",".join(map(str, torch.as_tensor(segments).flatten().tolist()))]
    r = run(*args)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    doc = json.loads(r.stdout)
    return torch.tensor(np.array(doc["data"], dtype=np.float64).astype(np.float32)).reshape(doc["shape"])


def same_bits(a, b):
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


def expect_exact(name, got, want):
    check(name, same_bits(got, want), f"max abs diff {(got - want).abs().max().item() if got.shape == want.shape else (got.shape, want.shape)}")


class GPT2(torch.nn.Module):
    def __init__(self, vocab=300, context=64, dim=17):
        super().__init__()
        self.transformer = torch.nn.Module()
        self.transformer.wte = torch.nn.Embedding(vocab, dim)
        self.transformer.wpe = torch.nn.Embedding(context, dim)
        self.lm_head = torch.nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as GPT-2 does


def ids_for(vocab, batch=3, length=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, length), generator=g)
    ids[0, 0], ids[-1, -1] = 0, vocab - 1
    return ids


def test_embedding_state_dict():
    torch.manual_seed(1)
    emb = torch.nn.Embedding(50, 7)
    path = os.path.join(WORK, "embedding.pt")
    torch.save(emb.state_dict(), path)
    model, _ = convert("embedding", [path], "--token", "weight")
    ids = ids_for(50)
    with torch.no_grad():
        expect_exact("nn.Embedding state dict", embed(model, ids), emb(ids))


def test_gpt2_dtypes():
    torch.manual_seed(2)
    gpt = GPT2()
    ids = ids_for(300)
    start = 5
    positions = torch.arange(start, start + ids.shape[1])
    for label, cast in (("f32", lambda m: m), ("f16", lambda m: m.half()), ("bf16", lambda m: m.bfloat16()),
                        ("f64", lambda m: m.double())):
        m = cast(GPT2())
        m.load_state_dict({k: v.to(m.transformer.wte.weight.dtype) for k, v in gpt.state_dict().items()})
        path = os.path.join(WORK, f"gpt2_{label}.pt")
        torch.save(m.state_dict(), path)
        model, stdout = convert(f"gpt2_{label}", [path], "--dtype", "f32")
        check(f"gpt2 {label} detected", "recipe: gpt2" in stdout, stdout)
        native = {"f32": "f32", "f16": "f16", "bf16": "bf16", "f64": "f32"}[label]
        _, stdout = convert(f"gpt2_{label}_native", [path])
        check(f"gpt2 {label} checkpoint -> {native} tables by default", f"tables as {native}" in stdout, stdout)
        wte, wpe = m.transformer.wte.weight.detach().float(), m.transformer.wpe.weight.detach().float()
        got = embed(model, ids, start)
        if label == "f32":
            with torch.no_grad():  # the tutorial's expression, on the module itself
                want = m.transformer.wte(ids) + m.transformer.wpe(positions)
        else:
            # f16/bf16: exact upcast; f64: rounded to nearest float, as torch's .float() does.
            want = wte[ids] + wpe[positions]
        expect_exact(f"gpt2 {label} source -> f32 table", got, want)

    # f32 source to narrower tables: the rounding must be torch's own, bit for bit.
    wte, wpe = gpt.transformer.wte.weight.detach(), gpt.transformer.wpe.weight.detach()
    src = os.path.join(WORK, "gpt2_f32.pt")
    for dtype, cast in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        model, _ = convert(f"gpt2_to_{dtype}", [src], "--dtype", dtype)
        want = wte.to(cast).float()[ids] + wpe.to(cast).float()[positions]
        got = embed(model, ids, start)
        expect_exact(f"gpt2 f32 -> {dtype} table matches torch rounding", got, want)
        ulp = 2.0 ** (-11 if dtype == "f16" else -8)
        bound = ulp * (wte[ids].abs() + wpe[positions].abs()) + 1e-6
        exact = wte[ids] + wpe[positions]
        check(f"gpt2 f32 -> {dtype} within stated bound", bool(((got - exact).abs() <= bound).all()))
    model, stdout = convert("gpt2_to_int8", [src], "--dtype", "int8")
    check("int8 reports its error", "max abs error" in stdout and "mean abs error" in stdout, stdout)
    got = embed(model, ids, start)
    step = lambda w: (w.max(dim=1).values - w.min(dim=1).values) / 255.0
    bound = (step(wte)[ids] + step(wpe)[positions]).unsqueeze(-1) / 2 * 1.001 + 1e-6
    err = (got - (wte[ids] + wpe[positions])).abs()
    check("gpt2 f32 -> int8 within half a step per table", bool((err <= bound).all()), f"worst excess {(err - bound).max().item()}")


def test_views():
    torch.manual_seed(3)
    base = torch.randn(16, 60)
    big = torch.randn(100, 16)
    tok, pos = base.t(), big[20:84]  # transposed (strides (1, 60)) and offset (320 elements) views
    path = os.path.join(WORK, "views.pt")
    torch.save({"tok": tok, "pos": pos}, path)
    r = run("inspect", "--json", path)
    tensors = {t["name"]: t for t in json.loads(r.stdout)["tensors"]}
    check("inspect shows the transposed strides", tensors["tok"]["strides"] == [1, 60], tensors["tok"])
    check("inspect shows the view's storage offset", tensors["pos"]["storage_offset"] == 320, tensors["pos"])
    model, _ = convert("views", [path], "--token", "tok", "--position", "pos")
    ids = ids_for(60)
    expect_exact("transposed and offset views", embed(model, ids), tok[ids] + pos[torch.arange(ids.shape[1])])


class BertEmbeddings(torch.nn.Module):
    """The shape of Hugging Face's BertEmbeddings: (word + token_type) + position, LayerNorm."""

    def __init__(self, vocab, context, types, dim, eps):
        super().__init__()
        self.word_embeddings = torch.nn.Embedding(vocab, dim)
        self.position_embeddings = torch.nn.Embedding(context, dim)
        self.token_type_embeddings = torch.nn.Embedding(types, dim)
        self.LayerNorm = torch.nn.LayerNorm(dim, eps=eps)
        torch.nn.init.normal_(self.LayerNorm.weight, 1.0, 0.2)
        torch.nn.init.normal_(self.LayerNorm.bias, 0.0, 0.2)

    def forward(self, ids, types, positions):
        x = self.word_embeddings(ids) + self.token_type_embeddings(types)
        x = x + self.position_embeddings(positions)
        return self.LayerNorm(x)


def test_bert_and_roberta():
    torch.manual_seed(4)
    for family, prefix, types, offset, eps in (("bert", "bert.", 2, 0, 1e-12), ("roberta", "roberta.", 1, 2, 1e-5)):
        emb = BertEmbeddings(120, 40 + offset, types, 33, eps)
        sd = {f"{prefix}embeddings.{k}": v for k, v in emb.state_dict().items()}
        path = os.path.join(WORK, f"{family}.bin")
        torch.save(sd, path)
        model, stdout = convert(family, [path])
        check(f"{family} detected", f"recipe: {family}" in stdout, stdout)
        meta = json.loads(run("inspect", "--json", model).stdout)["metadata"]
        check(f"{family} metadata", meta["model.family"] == family and meta["position.offset"] == offset and
              math.isclose(meta["norm.epsilon"], eps), meta)
        ids = ids_for(120)
        segments = torch.randint(0, types, ids.shape)
        positions = torch.arange(3, 3 + ids.shape[1]) + offset
        with torch.no_grad():
            want = emb(ids, segments, positions)
        got = embed(model, ids, 3, segments)
        diff = (got - want).abs().max().item()
        check(f"{family} LayerNorm(word + type + position) within 1e-5", diff <= 1e-5, f"max abs diff {diff}")
    # Old BERT files name the LayerNorm parameters gamma and beta.
    sd = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
          for k, v in {f"bert.embeddings.{k}": v for k, v in emb.state_dict().items()}.items()}
    path = os.path.join(WORK, "bert_gamma_beta.bin")
    torch.save(sd, path)
    _, stdout = convert("bert_gamma_beta", [path], "--preset", "bert")
    check("BERT gamma/beta names", "LayerNorm.gamma" in stdout and "LayerNorm.beta" in stdout, stdout)


def test_opt():
    torch.manual_seed(5)
    tok, pos = torch.nn.Embedding(90, 24), torch.nn.Embedding(32 + 2, 24)
    sd = {"model.decoder.embed_tokens.weight": tok.weight, "model.decoder.embed_positions.weight": pos.weight}
    path = os.path.join(WORK, "opt.bin")
    torch.save(sd, path)
    # Without config.json, OPT's names are also Whisper's decoder's (no offset): refused, not guessed.
    r = run("convert", path, "-o", os.path.join(WORK, "opt_guess.embt"))
    check("opt names without config refused", r.returncode != 0 and "opt:" in r.stderr and "whisper:" in r.stderr
          and "--preset" in r.stderr, r.stderr)
    model, stdout = convert("opt", [path], "--preset", "opt")
    check("opt by preset", "recipe: opt" in stdout, stdout)
    ids = ids_for(90)
    with torch.no_grad():
        expect_exact("opt positions offset by 2", embed(model, ids, 4), tok(ids) + pos(torch.arange(4, 4 + ids.shape[1]) + 2))


def test_formats_and_nesting():
    torch.manual_seed(6)
    gpt = GPT2()
    sd = gpt.state_dict()
    ids = ids_for(300)
    with torch.no_grad():
        want = gpt.transformer.wte(ids) + gpt.transformer.wpe(torch.arange(ids.shape[1]))
    cases = {
        "legacy": (lambda p: torch.save(sd, p, _use_new_zipfile_serialization=False), []),
        "protocol4": (lambda p: torch.save(sd, p, pickle_protocol=4), []),
        "nanogpt": (lambda p: torch.save({"model": {"_orig_mod." + k: v for k, v in sd.items()}, "iter_num": 7,
                                          "model_args": {"n_layer": 2, "bias": True}, "best_val_loss": torch.tensor(2.5)}, p), []),
        "model_state_dict": (lambda p: torch.save({"model_state_dict": sd, "epoch": 3}, p), ["--key", "model_state_dict"]),
    }
    for name, (save, extra) in cases.items():
        path = os.path.join(WORK, f"fmt_{name}.pt")
        save(path)
        model, _ = convert(f"fmt_{name}", [path], *extra)
        expect_exact(f"{name} checkpoint", embed(model, ids), want)


def test_safetensors():
    torch.manual_seed(7)
    gpt = GPT2()
    ids = ids_for(300)
    with torch.no_grad():
        want = gpt.transformer.wte(ids) + gpt.transformer.wpe(torch.arange(ids.shape[1]))
    folder = os.path.join(WORK, "hf")
    os.makedirs(folder, exist_ok=True)
    arrays = {"transformer.wte.weight": gpt.transformer.wte.weight, "transformer.wpe.weight": gpt.transformer.wpe.weight,
              "transformer.h.0.ln_1.weight": torch.ones(17)}
    for name, t in arrays.items():
        np.save(os.path.join(folder, name + ".npy"), t.detach().numpy())
    writer = r"""
import json, os, sys
import numpy as np
from safetensors.numpy import save_file
folder = sys.argv[1]
a = {n[:-4]: np.load(os.path.join(folder, n)) for n in os.listdir(folder) if n.endswith(".npy")}
save_file(a, os.path.join(folder, "model.safetensors"))
shards = [{k: a[k] for k in a if "wte" in k}, {k: a[k] for k in a if "wte" not in k}]
os.makedirs(os.path.join(folder, "sharded"))
names = [f"model-0000{i + 1}-of-00002.safetensors" for i in range(2)]
for shard, name in zip(shards, names):
    save_file(shard, os.path.join(folder, "sharded", name))
index = {"metadata": {"total_size": sum(v.nbytes for v in a.values())},
         "weight_map": {k: names[i] for i, s in enumerate(shards) for k in s}}
json.dump(index, open(os.path.join(folder, "sharded", "model.safetensors.index.json"), "w"))
"""
    python = shutil.which("python3")
    r = subprocess.run([python, "-c", writer, folder], capture_output=True, text=True)
    if r.returncode != 0:
        check("safetensors reference writer available", False, r.stderr)
        return
    for label, inputs in (("safetensors file", [os.path.join(folder, "model.safetensors")]),
                          ("sharded index", [os.path.join(folder, "sharded", "model.safetensors.index.json")]),
                          ("sharded folder", [os.path.join(folder, "sharded")])):
        model, _ = convert("st_" + label.replace(" ", "_"), inputs)
        expect_exact(label, embed(model, ids), want)


def test_token_only_families():
    torch.manual_seed(8)
    for family, name, vocab, dim in (("llama", "model.embed_tokens.weight", 500, 16),
                                     ("gemma", "model.embed_tokens.weight", 256000, 8),
                                     ("t5", "shared.weight", 128, 12)):
        tok = torch.nn.Embedding(vocab, dim)
        path = os.path.join(WORK, f"{family}.pt")
        torch.save({name: tok.weight, "model.norm.weight": torch.ones(dim)}, path)
        if family != "t5":  # llama's names are gemma's too, and gemma scales: refused without config
            r = run("convert", path, "-o", os.path.join(WORK, f"{family}_guess.embt"))
            check(f"{family} names without config refused", r.returncode != 0 and "llama:" in r.stderr and
                  "gemma:" in r.stderr, r.stderr)
        model, stdout = convert(family, [path], *(["--preset", family] if family != "t5" else []))
        check(f"{family} detected", f"recipe: {family}" in stdout, stdout)
        ids = ids_for(vocab)
        with torch.no_grad():
            want = tok(ids)
            if family == "gemma":  # Gemma scales by sqrt(hidden), as a float32 multiply
                want = want * torch.tensor(dim ** 0.5, dtype=torch.float32)
        expect_exact(f"{family} embeddings", embed(model, ids, 10 ** 6), want)


def test_external_fixtures():
    expected = {"test.pt": ("test", "int64", [2, 4], [4, 1]),
                "test_with_key.pt": ("model_state_dict.test", "int64", [2, 4], [4, 1]),
                "fortran_tensor_3d.pth": ("tensor_fortran", "int64", [2, 3, 4], [1, 2, 6]),
                "jfk-codes.safetensors": ("codes", "int64", [1, 2, 828], [1656, 828, 1])}
    for file, (name, dtype, shape, strides) in expected.items():
        path = os.path.join(EXTERNAL, file)
        r = run("inspect", "--json", path)
        tensors = json.loads(r.stdout)["tensors"] if r.returncode == 0 else []
        check(f"inspect {file}", r.returncode == 0 and len(tensors) == 1 and tensors[0]["name"] == name and
              tensors[0]["dtype"] == dtype and tensors[0]["shape"] == shape and tensors[0]["strides"] == strides,
              r.stdout + r.stderr)
        out = os.path.join(WORK, "refused.embt")
        r = run("convert", path, "-o", out, "--token", name)
        check(f"convert {file} refused naming tensor and dtype", r.returncode != 0 and f"'{name}'" in r.stderr and
              "int64" in r.stderr and not os.path.exists(out), r.stderr)


def test_refusals_leave_nothing():
    torch.manual_seed(9)
    gpt = GPT2()
    path = os.path.join(WORK, "gpt2_for_refusals.pt")
    torch.save(gpt.state_dict(), path)
    out = os.path.join(WORK, "kept.embt")
    with open(out, "w") as f:
        f.write("precious")
    r = run("convert", path, "-o", out)
    check("existing output kept without --force", r.returncode != 0 and open(out).read() == "precious" and
          "--force" in r.stderr, r.stderr)
    r = run("convert", path, "-o", os.path.join(WORK, "y.embt"), "--token", "nope")
    check("unknown tensor name lists candidates", r.returncode != 0 and "transformer.wte.weight" in r.stderr, r.stderr)
    r = run("convert", path, "-o", os.path.join(WORK, "x.embt"), "--preset", "bert")
    check("wrong preset names what is missing", r.returncode != 0 and "no token table" in r.stderr, r.stderr)
    leftovers = [f for f in os.listdir(WORK) if f.startswith(".") and ".tmp." in f]
    check("no temporary files left behind", not leftovers, leftovers)


def test_sinusoidal_positions():
    # The original Transformer's fixed encoding, as PyTorch tutorials compute it (here in float64).
    torch.manual_seed(11)
    vocab, dim, context = 60, 24, 50
    tok = torch.nn.Embedding(vocab, dim)
    path = os.path.join(WORK, "transformer.pt")
    torch.save({"encoder.embed.weight": tok.weight}, path)
    model, stdout = convert("sinusoidal", [path], "--token", "encoder.embed.weight", "--positions", "sinusoidal",
                            "--context", context)
    position = torch.arange(context, dtype=torch.float64).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, dim, 2, dtype=torch.float64) * (-math.log(10000.0) / dim))
    pe = torch.zeros(context, dim, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    ids = ids_for(vocab, 2, 20)
    with torch.no_grad():
        want = tok(ids) + pe.float()[torch.arange(30, 50)]
    got = embed(model, ids, 30)
    diff = (got - want).abs().max().item()
    check("sinusoidal positions match torch within 1e-6", diff <= 1e-6, f"max abs diff {diff}")
    meta = json.loads(run("inspect", "--json", model).stdout)["metadata"]
    check("sinusoidal metadata", meta["position.kind"] == "sinusoidal" and meta["context_length"] == context, meta)
    r = run("convert", os.path.join(WORK, "gpt2_f32.pt"), "-o", os.path.join(WORK, "z.embt"), "--positions", "sinusoidal",
            "--context", "8")
    check("sinusoidal refused when a learned table exists", r.returncode != 0 and "already has a position table" in r.stderr,
          r.stderr)


def test_cli_options():
    torch.manual_seed(10)
    path = os.path.join(WORK, "gpt2_cli.pt")
    torch.save(GPT2().state_dict(), path)
    out = os.path.join(WORK, "cli.embt")
    r = run("convert", path, "-o", out, "--force", "--progress")
    check("--progress draws a bar on a non-terminal stderr", r.returncode == 0 and "converting [" in r.stderr, r.stderr)
    r = run("convert", path, "-o", out, "--force")
    check("no bar when stderr is not a terminal", r.returncode == 0 and "converting [" not in r.stderr, r.stderr)
    r = run("convert", path, "-o", out, "--force", "-q")
    check("-q prints nothing", r.returncode == 0 and r.stdout == "" and r.stderr == "", r.stdout + r.stderr)
    r = run("convert", path, "-o", out, "--force", "-v")
    check("-v names the files read", r.returncode == 0 and "(torch zip)" in r.stdout, r.stdout)
    r = run("convert", path, "-o", out, "--force", "--dtype", "f8")
    check("bad --dtype is a usage error", r.returncode == 2 and "--dtype 'f8'" in r.stderr, r.stderr)


with tempfile.TemporaryDirectory() as WORK:
    for test in [v for k, v in dict(globals()).items() if k.startswith("test_")]:
        try:
            test()
        except Exception as e:  # a crash of one case is a failure, not the end of the run
            check(test.__name__, False, repr(e))

tally.finish()
