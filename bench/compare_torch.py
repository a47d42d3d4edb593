"""embedrt beside PyTorch and a memory-copy roofline, measured in one run.

For each shape, models are written by torch.save and converted by `embedrt convert`; then, for
R repetitions interleaved (so the shared machine's noise hits every contender alike), one sample
of each contender is taken: embedrt (`embedrt bench --json`), PyTorch as a tutorial writes it
(`tok(ids) + pos(arange(L))`), PyTorch at its best (`index_select(out=)` + `add_`), a BERT
embeddings module (the code of Hugging Face's BertEmbeddings.forward, in eval mode; transformers
itself is not packaged for Debian), and the memcpy roofline (`embedrt bench --roofline`). The
report is the median of the R samples, and ratios between medians.

usage: /usr/bin/python3 bench/compare_torch.py EMBEDRT_CLI [--repeat 5] [--quick] [--out bench/results]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("cli")
parser.add_argument("--repeat", type=int, default=5)
parser.add_argument("--seconds", type=float, default=0.4, help="time per sample")
parser.add_argument("--quick", action="store_true", help="GPT-2 shape and decode only")
parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
args = parser.parse_args()
cores = os.cpu_count()
THREADS = sorted({1, cores})


def embedrt_bench(model, batch, seq, threads, out_dtype="f32"):
    r = subprocess.run([args.cli, "bench", model, "--batch", str(batch), "--seq", str(seq), "--threads", str(threads),
                        "--out-dtype", out_dtype, "--seconds", str(args.seconds), "--json"],
                       capture_output=True, text=True, check=True)
    doc = json.loads(r.stdout)
    return doc["tokens_per_second"], doc["isa"]


def roofline(threads):
    r = subprocess.run([args.cli, "bench", "-", "--roofline", "--threads", str(threads), "--seconds", str(args.seconds),
                        "--json"], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["gb_per_second"]


ID_SETS = 8  # id batches rotated between calls, as `embedrt bench --id-sets 8` does


class Rotation:
    """Hands out ID_SETS random id tensors in turn, so large batches touch more rows than the
    last-level cache holds across calls (a memory-bound figure, like embedrt's)."""

    def __init__(self, high, shape):
        self.sets = [torch.randint(0, high, shape) for _ in range(ID_SETS)]
        self.k = 0

    def __call__(self):
        self.k += 1
        return self.sets[self.k % ID_SETS]


def torch_rate(fn, tokens):
    """Median tokens/s of fn(), timed in groups so that each sample lasts at least 20 us."""
    fn()
    per = 1
    while True:
        start = time.perf_counter()
        for _ in range(per):
            fn()
        if time.perf_counter() - start > 2e-5 or per > 1 << 16:
            break
        per *= 2
    samples, deadline = [], time.perf_counter() + args.seconds
    while len(samples) < 5 or time.perf_counter() < deadline:
        start = time.perf_counter()
        for _ in range(per):
            fn()
        samples.append((time.perf_counter() - start) / per)
    return tokens / statistics.median(samples)


class BertEmbeddings(torch.nn.Module):
    """Hugging Face's BertEmbeddings.forward (absolute positions), line for line."""

    def __init__(self, vocab, context, types, dim):
        super().__init__()
        self.word_embeddings = torch.nn.Embedding(vocab, dim)
        self.position_embeddings = torch.nn.Embedding(context, dim)
        self.token_type_embeddings = torch.nn.Embedding(types, dim)
        self.LayerNorm = torch.nn.LayerNorm(dim, eps=1e-12)
        self.dropout = torch.nn.Dropout(0.1)

    def forward(self, input_ids, token_type_ids, position_ids):
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        embeddings += self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


def write_models(work):
    """torch.save checkpoints, converted by embedrt: name -> (path, vocab, dim, context)."""
    torch.manual_seed(0)
    models = {}

    def convert(name, checkpoint, *extra):
        path = os.path.join(work, name + ".embt")
        subprocess.run([args.cli, "convert", checkpoint, "-o", path, "--force", "-q", *extra], check=True)
        return path

    gpt2 = {"transformer.wte.weight": torch.randn(50257, 768) * 0.02, "transformer.wpe.weight": torch.randn(1024, 768) * 0.01}
    ckpt = os.path.join(work, "gpt2.pt")
    torch.save(gpt2, ckpt)
    for dtype in ("f32", "bf16", "f16", "int8"):
        models[f"gpt2-{dtype}"] = convert(f"gpt2-{dtype}", ckpt, "--dtype", dtype)
    tensors = {"gpt2": gpt2}
    if not args.quick:
        bert = BertEmbeddings(30522, 512, 2, 768).eval()
        ckpt = os.path.join(work, "bert.bin")
        torch.save({"bert.embeddings." + k: v for k, v in bert.state_dict().items()}, ckpt)
        models["bert-f32"] = convert("bert-f32", ckpt)
        tensors["bert"] = bert
        llama = {"model.embed_tokens.weight": torch.randn(128256, 4096) * 0.02}
        ckpt = os.path.join(work, "llama.pt")
        torch.save(llama, ckpt)
        for dtype in ("f32", "bf16"):
            models[f"llama-{dtype}"] = convert(f"llama-{dtype}", ckpt, "--dtype", dtype, "--preset", "llama")
        os.unlink(ckpt)
        tensors["llama"] = llama
    return models, tensors


def cases(models, tensors):
    """(name, threads, {contender: sample function -> tokens/s}) for every measured row."""
    gpt2 = tensors["gpt2"]
    rows = []
    for threads in THREADS:
        B, L = 8, 1024
        ids = Rotation(50257, (B, L))
        for dtype, out in (("f32", "f32"), ("bf16", "f32"), ("f16", "f32"), ("int8", "f32"), ("f32", "bf16"), ("bf16", "bf16")):
            contenders = {"embedrt": lambda m=models[f"gpt2-{dtype}"], o=out, t=threads: embedrt_bench(m, B, L, t, o)}
            if dtype == "f32" and out == "f32":
                W, P = gpt2["transformer.wte.weight"], gpt2["transformer.wpe.weight"]
                tok, pos = torch.nn.Embedding.from_pretrained(W), torch.nn.Embedding.from_pretrained(P)
                buf = torch.empty(B * L, 768)

                def tutorial(tok=tok, pos=pos, ids=ids):
                    with torch.no_grad():
                        return tok(ids()) + pos(torch.arange(L))

                def best(W=W, P=P, buf=buf, ids=ids):
                    torch.index_select(W, 0, ids().view(-1), out=buf)
                    buf.view(B, L, 768).add_(P[:L])

                contenders["torch tutorial"] = lambda f=tutorial: torch_rate(f, B * L)  # noqa: E731
                contenders["torch best"] = lambda f=best: torch_rate(f, B * L)
            if dtype == "bf16" and out == "bf16":
                Wb, Pb = gpt2["transformer.wte.weight"].bfloat16(), gpt2["transformer.wpe.weight"].bfloat16()
                bufb = torch.empty(B * L, 768, dtype=torch.bfloat16)

                def best_bf16(W=Wb, P=Pb, buf=bufb, ids=ids):
                    torch.index_select(W, 0, ids().view(-1), out=buf)
                    buf.view(B, L, 768).add_(P[:L])

                contenders["torch best"] = lambda f=best_bf16: torch_rate(f, B * L)
            rows.append((f"GPT-2 50257x768, 8x1024, {dtype} table -> {out}", threads, B * L, 768, dtype, out, contenders))
        # Single-token decode from a warm table.
        one = torch.tensor([[464]])
        W, P = gpt2["transformer.wte.weight"], gpt2["transformer.wpe.weight"]
        tok, pos = torch.nn.Embedding.from_pretrained(W), torch.nn.Embedding.from_pretrained(P)
        buf1 = torch.empty(1, 768)

        # Closures bind their tensors now (names below are reused for other shapes).
        def decode_tutorial(tok=tok, pos=pos, one=one):
            with torch.no_grad():
                return tok(one) + pos(torch.arange(1))

        def decode_best(W=W, P=P, one=one, buf1=buf1):
            torch.index_select(W, 0, one.view(-1), out=buf1)
            buf1.add_(P[:1])

        rows.append(("GPT-2 decode, 1x1, f32", threads, 1, 768, "f32", "f32",
                     {"embedrt": lambda t=threads: embedrt_bench(models["gpt2-f32"], 1, 1, t),
                      "torch tutorial": lambda: torch_rate(decode_tutorial, 1),
                      "torch best": lambda: torch_rate(decode_best, 1)}))
        if "bert" in tensors:
            bert = tensors["bert"]
            bids, btypes = Rotation(30522, (8, 512)), torch.zeros(8, 512, dtype=torch.long)
            positions = torch.arange(512).unsqueeze(0)

            def bert_module(bert=bert, bids=bids, btypes=btypes, positions=positions):
                with torch.no_grad():
                    return bert(bids(), btypes, positions)

            rows.append(("BERT-base 30522x768 + LayerNorm, 8x512, f32", threads, 8 * 512, 768, "f32", "f32",
                         {"embedrt": lambda t=threads: embedrt_bench(models["bert-f32"], 8, 512, t),
                          "torch BERT module": lambda: torch_rate(bert_module, 8 * 512)}))
        if "llama" in tensors:
            W = tensors["llama"]["model.embed_tokens.weight"]
            lids = Rotation(128256, (4, 512))
            lbuf = torch.empty(4 * 512, 4096)
            emb = torch.nn.Embedding.from_pretrained(W)

            def llama_tutorial(emb=emb, lids=lids):
                with torch.no_grad():
                    return emb(lids())

            def llama_best(W=W, lids=lids, lbuf=lbuf):
                torch.index_select(W, 0, lids().view(-1), out=lbuf)

            for dtype in ("f32", "bf16"):
                contenders = {"embedrt": lambda m=models[f"llama-{dtype}"], t=threads: embedrt_bench(m, 4, 512, t)}
                if dtype == "f32":
                    contenders["torch tutorial"] = lambda: torch_rate(llama_tutorial, 4 * 512)
                    contenders["torch best"] = lambda: torch_rate(llama_best, 4 * 512)
                rows.append((f"Llama-3 128256x4096, 4x512, {dtype} table -> f32", threads, 4 * 512, 4096, dtype, "f32", contenders))
    return rows


def main():
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.out, prefix=".compare-") as work:
        models, tensors = write_models(work)
        rows = cases(models, tensors)
        samples = {(name, threads, c): [] for name, threads, *_, contenders in rows for c in contenders}
        roof = {t: [] for t in THREADS}
        isa = "?"
        for rep in range(args.repeat):
            for t in THREADS:
                roof[t].append(roofline(t))
            for name, threads, tokens, dim, dtype, out, contenders in rows:
                torch.set_num_threads(threads)
                for contender, fn in contenders.items():
                    value = fn()
                    if isinstance(value, tuple):
                        value, isa = value
                    samples[(name, threads, contender)].append(value)
            print(f"repetition {rep + 1}/{args.repeat} done", file=sys.stderr, flush=True)

    med = {k: statistics.median(v) for k, v in samples.items()}
    roof_med = {t: statistics.median(v) for t, v in roof.items()}
    bytes_per_token = {"f32": 4, "f16": 2, "bf16": 2}
    lines = [f"Machine: {platform.machine()}, {cores} cores, embedrt isa {isa}, torch {torch.__version__}; "
             f"{args.repeat} interleaved repetitions, medians; each contender rotates through {ID_SETS} random id batches. "
             f"Roofline: memcpy of 256 MiB, bytes read + written.", "",
             "| shape | threads | embedrt tokens/s | GB/s (% of roofline) | torch best | torch tutorial | BERT module | embedrt / best | embedrt / tutorial | embedrt / module |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    records = []
    for name, threads, tokens, dim, dtype, out, contenders in rows:
        e = med[(name, threads, "embedrt")]
        table_row = {"f32": 4 * dim, "f16": 2 * dim, "bf16": 2 * dim, "int8": (dim + 3) // 4 * 4 + 8}[dtype]
        gbps = e * (table_row + bytes_per_token[out] * dim) / 1e9
        best, tut, mod = (med.get((name, threads, c)) for c in ("torch best", "torch tutorial", "torch BERT module"))
        fmt = lambda v: f"{v / 1e6:.2f} M" if v else "-"
        ratio = lambda v: f"{e / v:.2f}x" if v else "-"
        lines.append(f"| {name} | {threads} | {fmt(e)} | {gbps:.1f} ({100 * gbps / roof_med[threads]:.0f}%) | {fmt(best)} | "
                     f"{fmt(tut)} | {fmt(mod)} | {ratio(best)} | {ratio(tut)} | {ratio(mod)} |")
        records.append({"shape": name, "threads": threads, "table": dtype, "out": out, "embedrt_tokens_per_s": e,
                        "embedrt_gb_per_s": gbps, "roofline_gb_per_s": roof_med[threads], "torch_best": best,
                        "torch_tutorial": tut, "torch_bert_module": mod,
                        "samples": {c: samples[(name, threads, c)] for c in contenders}})
    lines.append("")
    lines += [f"Roofline (memcpy) at {t} thread(s): {roof_med[t]:.1f} GB/s" for t in THREADS]
    decode = [r for r in records if r["shape"].startswith("GPT-2 decode")]
    for r in decode:
        lines.append(f"Decode at {r['threads']} thread(s): embedrt {1e9 / r['embedrt_tokens_per_s']:.0f} ns per call, "
                     f"torch best {1e9 / r['torch_best']:.0f} ns, torch tutorial {1e9 / r['torch_tutorial']:.0f} ns")
    report = "\n".join(lines)
    print(report)
    with open(os.path.join(args.out, "comparison.md"), "w") as f:
        f.write(report + "\n")
    with open(os.path.join(args.out, "comparison.json"), "w") as f:
        json.dump({"isa": isa, "cores": cores, "repeat": args.repeat, "roofline": roof, "rows": records}, f, indent=1)
    plot(records)


def plot(records):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    gpt2 = [r for r in records if r["shape"].startswith("GPT-2 50257")]
    labels = sorted({f"{r['table']}->{r['out']}" for r in gpt2}, key=lambda s: [r['shape'] for r in gpt2].index(
        next(r['shape'] for r in gpt2 if f"{r['table']}->{r['out']}" == s)))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(THREADS)
    for k, t in enumerate(THREADS):
        values = [next(r["embedrt_tokens_per_s"] for r in gpt2 if r["threads"] == t and f"{r['table']}->{r['out']}" == l) / 1e6
                  for l in labels]
        ax.bar([i + k * width for i in range(len(labels))], values, width, label=f"embedrt, {t} thread(s)")
    for k, t in enumerate(THREADS):
        best = next(r["torch_best"] for r in gpt2 if r["threads"] == t and r["table"] == "f32" and r["out"] == "f32")
        ax.axhline(best / 1e6, linestyle="--", color=f"C{k + 2}", label=f"torch best f32, {t} thread(s)")
    ax.set_xticks([i + width * (len(THREADS) - 1) / 2 for i in range(len(labels))], labels)
    ax.set_ylabel("M tokens/s")
    ax.set_title("GPT-2 shape (50257x768, 8x1024): tokens/s by table -> output dtype")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "comparison.png"), dpi=110)


main()
