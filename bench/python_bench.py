"""The Python package beside the C++ library, measured in one run.

On a GPT-2-shaped f32 model (50257 x 768, 1024 positions, written here with random tables), for R
repetitions interleaved (the shared machine's noise hits every contender alike), one sample of
each contender:
  - decode, 1 token, warm: Model.embed(ids, starts=..., out=out), and Model.embed(ids) (a new
    array each call), against `embedrt bench --batch 1 --seq 1 --threads 1`: nanoseconds per call;
  - throughput, 8 x 1024 tokens on every core: Model.embed(ids, out=out) and Model.embed(ids),
    against `embedrt bench --batch 8 --seq 1024`: tokens per second;
  - concurrency: N Python threads (N = 1..cores) each calling Model.embed(8 x 1024, threads=1,
    out=its own) at once, tokens per second over all of them (the GIL is released for the work,
    so this should grow with N up to the core count), and the same for decode calls (whose time
    is mostly Python's own, under the GIL: these do not scale).
Where torch is importable, decode with torch tensors in and out is measured too (DLPack).
Every contender rotates through 8 random id batches per shape, as `embedrt bench` does. The report
is the median of the R samples and ratios between medians.

usage: python bench/python_bench.py EMBEDRT_CLI [--repeat 5] [--seconds 0.5] [--out bench/results]
(a Python with embedrt installed: build/python-venv/bin/python, see tools/setup-python-venv.sh)
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

import embedrt

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools", "python"))
from embt_writer import write_embt  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("cli")
parser.add_argument("--repeat", type=int, default=5)
parser.add_argument("--seconds", type=float, default=0.5, help="time per sample")
parser.add_argument("--out", default=os.path.join(HERE, "results"))
args = parser.parse_args()
CORES = os.cpu_count()
VOCAB, DIM, CONTEXT, ID_SETS = 50257, 768, 1024, 8


def cpp_bench(model, batch, seq, threads=None):
    command = [args.cli, "bench", model, "--batch", str(batch), "--seq", str(seq), "--seconds", str(args.seconds), "--json"]
    if threads:
        command += ["--threads", str(threads)]
    doc = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    return doc["latency_seconds"]["p50"], doc["tokens_per_second"]


def timed(call):
    """Median seconds per call of call(k) over args.seconds, timed in groups of at least 20 us
    (as `embedrt bench` does: a clock read costs tens of nanoseconds)."""
    for k in range(3):
        call(k)
    per = 1
    while True:
        start = time.perf_counter()
        for k in range(per):
            call(k)
        if time.perf_counter() - start >= 2e-5 or per >= 1 << 20:
            break
        per *= 2
    samples, k, deadline = [], 0, time.perf_counter() + args.seconds
    while len(samples) < 10 or time.perf_counter() < deadline:
        start = time.perf_counter()
        for _ in range(per):
            call(k)
            k += 1
        samples.append((time.perf_counter() - start) / per)
    return statistics.median(samples)


def concurrent_rate(model, ids_sets, callers, out_shape, **kwargs):
    """Tokens per second over `callers` Python threads embedding at once for args.seconds."""
    tokens = ids_sets[0].size
    counts = [0] * callers
    start_line = threading.Barrier(callers + 1)
    stop = threading.Event()

    def worker(t):
        out = model.embed(ids_sets[0], **kwargs)  # aligned, and every page already touched
        assert out.shape == out_shape
        start_line.wait()
        k = t
        while not stop.is_set():
            model.embed(ids_sets[k % ID_SETS], out=out, **kwargs)
            counts[t] += 1
            k += 1

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(callers)]
    for p in pool:
        p.start()
    start_line.wait()
    begin = time.perf_counter()
    time.sleep(args.seconds)
    stop.set()
    for p in pool:
        p.join()
    return sum(counts) * tokens / (time.perf_counter() - begin)


def main():
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "gpt2.embt")
        write_embt(path, [("wte", "token", "f32", (rng.standard_normal((VOCAB, DIM)) * 0.02).astype(np.float32)),
                          ("wpe", "position", "f32", (rng.standard_normal((CONTEXT, DIM)) * 0.01).astype(np.float32))],
                   {"model.family": "gpt2", "position.kind": "learned", "context_length": CONTEXT})
        model = embedrt.Model(path, residency="populate")
        decode_ids = [rng.integers(0, VOCAB, size=(1, 1)) for _ in range(ID_SETS)]
        batch_ids = [rng.integers(0, VOCAB, size=(8, CONTEXT)) for _ in range(ID_SETS)]
        decode_out = model.embed(decode_ids[0])
        batch_out = model.embed(batch_ids[0])  # 64-byte aligned, like the C++ bench's buffer
        starts = np.array([5])

        contenders = {
            "decode C++ (embedrt bench)": lambda: cpp_bench(path, 1, 1, threads=1)[0],
            "decode Python, out=": lambda: timed(lambda k: model.embed(decode_ids[k % ID_SETS], starts=starts,
                                                                       out=decode_out)),
            "decode Python, new array": lambda: timed(lambda k: model.embed(decode_ids[k % ID_SETS], starts=starts)),
            "8x1024 C++ (embedrt bench)": lambda: cpp_bench(path, 8, CONTEXT)[1],
            "8x1024 Python, out=": lambda: 8 * CONTEXT / timed(lambda k: model.embed(batch_ids[k % ID_SETS],
                                                                                     out=batch_out)),
            "8x1024 Python, new array": lambda: 8 * CONTEXT / timed(lambda k: model.embed(batch_ids[k % ID_SETS])),
        }
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None:
            torch_ids = [torch.from_numpy(ids) for ids in decode_ids]
            torch_out = torch.empty(1, 1, DIM)
            contenders["decode Python, torch ids, out= torch"] = lambda: timed(
                lambda k: model.embed(torch_ids[k % ID_SETS], starts=starts, out=torch_out))
            contenders["decode Python, torch ids, new torch tensor"] = lambda: timed(
                lambda k: model.embed(torch_ids[k % ID_SETS], starts=starts, dtype=torch.float32))
        for n in range(1, CORES + 1):
            contenders[f"8x1024 x {n} Python threads (threads=1 each)"] = (
                lambda n=n: concurrent_rate(model, batch_ids, n, (8, CONTEXT, DIM), threads=1))
        for n in range(1, CORES + 1):
            contenders[f"decode x {n} Python threads"] = (
                lambda n=n: concurrent_rate(model, decode_ids, n, (1, 1, DIM)))
        samples = {name: [] for name in contenders}
        for r in range(args.repeat):
            for name, run in contenders.items():
                samples[name].append(run())
            print(f"round {r + 1}/{args.repeat} done", file=sys.stderr)
        model.close()

    median = {name: statistics.median(values) for name, values in samples.items()}
    lines = [f"# embedrt from Python beside the C++ library (`bench/python_bench.py`)", "",
             f"Machine: {platform.machine()}, {CORES} cores, isa {embedrt.isa()}, Python {platform.python_version()}, "
             f"numpy {np.__version__}; GPT-2 shape {VOCAB}x{DIM} f32, f32 output; {args.repeat} interleaved "
             f"repetitions, medians; every contender rotates through {ID_SETS} random id batches.", "",
             "| measure | C++ | Python, out= | Python, new array | Python / C++ (out=) | Python / C++ (new) |",
             "|---|---|---|---|---|---|"]
    cd, po, pn = (median[k] for k in ("decode C++ (embedrt bench)", "decode Python, out=", "decode Python, new array"))
    lines.append(f"| decode, 1 token, ns per call (1 thread) | {cd * 1e9:.0f} | {po * 1e9:.0f} | {pn * 1e9:.0f} | "
                 f"+{(po - cd) * 1e9:.0f} ns | +{(pn - cd) * 1e9:.0f} ns |")
    if "decode Python, torch ids, out= torch" in median:
        to_, tn_ = median["decode Python, torch ids, out= torch"], median["decode Python, torch ids, new torch tensor"]
        lines.append(f"| decode with torch tensors (torch {sys.modules['torch'].__version__}), ns per call | {cd * 1e9:.0f} | "
                     f"{to_ * 1e9:.0f} | {tn_ * 1e9:.0f} | +{(to_ - cd) * 1e9:.0f} ns | +{(tn_ - cd) * 1e9:.0f} ns |")
    ct, to, tn = (median[k] for k in ("8x1024 C++ (embedrt bench)", "8x1024 Python, out=", "8x1024 Python, new array"))
    lines.append(f"| 8x1024 tokens, M tokens/s (all cores) | {ct / 1e6:.2f} | {to / 1e6:.2f} | {tn / 1e6:.2f} | "
                 f"{to / ct:.3f}x | {tn / ct:.3f}x |")
    lines += ["", "Python threads calling one Model at once (each call `threads=1`, its own `out=`):", "",
              "| threads | 8x1024: M tokens/s | scaling | decode: M calls/s | scaling |", "|---|---|---|---|---|"]
    for n in range(1, CORES + 1):
        big, one_big = median[f"8x1024 x {n} Python threads (threads=1 each)"], median["8x1024 x 1 Python threads (threads=1 each)"]
        dec, one_dec = median[f"decode x {n} Python threads"], median["decode x 1 Python threads"]
        lines.append(f"| {n} | {big / 1e6:.2f} | {big / one_big:.2f}x | {dec / 1e6:.3f} | {dec / one_dec:.2f}x |")
    report = "\n".join(lines) + "\n"
    print(report)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "python_bench.md"), "w") as f:
        f.write(report)
    with open(os.path.join(args.out, "python_bench.json"), "w") as f:
        json.dump({"samples": samples, "medians": median, "repeat": args.repeat, "seconds": args.seconds,
                   "cores": CORES, "isa": embedrt.isa()}, f, indent=1)


if __name__ == "__main__":
    main()
