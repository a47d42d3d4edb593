"""Conversion speed and memory against `cp` of the same file, measured in one run.

Generates a torch.save'd GPT-2-style state dict of at least 1 GiB (a [vocab, 768] token table
plus a position table), then interleaves repetitions of:
  cp            plain `cp` (page cache to page cache; no durability)
  cp + fsync    `cp` followed by fsync of the copy (what a durable copy costs)
  convert       `embedrt convert --dtype f32` (writes atomically: reserve, fill, fsync, rename)
and reports medians, ratios, and the peak resident memory of convert (from wait4's rusage).

usage: /usr/bin/python3 bench/convert_vs_cp.py EMBEDRT_CLI [--gib 1.1] [--repeat 5] [--out bench/results]
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("cli")
parser.add_argument("--gib", type=float, default=1.1)
parser.add_argument("--repeat", type=int, default=5)
parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
parser.add_argument("--dir", default=None, help="where to write the files (default: a temp dir on the same disk as --out)")
args = parser.parse_args()


def timed(cmd):
    """Runs cmd; returns (seconds, peak RSS in MiB of the command itself).

    The peak comes from /usr/bin/time, not from this process's wait4: a child forked from a
    Python process that has just held a GiB of tensors reports the parent's pages as its own."""
    start = time.perf_counter()
    run = subprocess.run(["/usr/bin/time", "-f", "maxrss_kib=%M", *cmd], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if run.returncode != 0:
        sys.exit(f"{cmd} failed: {run.stderr}")
    kib = int(run.stderr.strip().splitlines()[-1].split("=")[1])
    return elapsed, kib / 1024


def fsync_file(path):
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


os.makedirs(args.out, exist_ok=True)
work = tempfile.mkdtemp(dir=args.dir or args.out, prefix=".convert-bench-")
try:
    dim, context = 768, 1024
    vocab = int(args.gib * 2**30 / (dim * 4))
    source = os.path.join(work, "state_dict.pt")
    torch.manual_seed(0)
    state = {"transformer.wte.weight": torch.randn(vocab, dim), "transformer.wpe.weight": torch.randn(context, dim)}
    torch.save(state, source)
    del state
    size = os.path.getsize(source)
    # Warm the page cache so every contender starts from the same place.
    subprocess.run(["cat", source], stdout=subprocess.DEVNULL, check=True)

    results = {"cp": [], "cp + fsync": [], "convert": []}
    peak = []
    for _ in range(args.repeat):
        for name in results:  # interleaved: noise from the shared machine hits all alike
            target = os.path.join(work, "copy.pt" if name.startswith("cp") else "model.embt")
            if os.path.exists(target):
                os.unlink(target)
            if name == "convert":
                seconds, rss = timed([args.cli, "convert", source, "-o", target, "-q", "--no-progress"])
                peak.append(rss)
            else:
                start = time.perf_counter()
                subprocess.run(["cp", source, target], check=True)
                if name == "cp + fsync":
                    fsync_file(target)
                seconds = time.perf_counter() - start
            results[name].append(seconds)
            if name == "cp + fsync" or name == "convert":
                os.sync()  # start the next contender with no dirty pages queued

    medians = {k: statistics.median(v) for k, v in results.items()}
    lines = [
        f"# convert vs cp ({size / 2**30:.2f} GiB torch.save file, f32 -> f32, {args.repeat} interleaved runs, medians)",
        "",
        "| contender | median s | GB/s (file size) | ratio to cp | ratio to cp + fsync |",
        "|---|---|---|---|---|",
    ]
    for name, m in medians.items():
        lines.append(f"| {name} | {m:.3f} | {size / m / 1e9:.2f} | {m / medians['cp']:.2f}x | {m / medians['cp + fsync']:.2f}x |")
    lines += ["", f"convert peak resident memory: median {statistics.median(peak):.0f} MiB, max {max(peak):.0f} MiB "
              f"(model {size / 2**20:.0f} MiB)"]
    report = "\n".join(lines)
    print(report)
    with open(os.path.join(args.out, "convert_vs_cp.md"), "w") as f:
        f.write(report + "\n")
finally:
    subprocess.run(["rm", "-rf", work])
