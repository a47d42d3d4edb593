"""A/B of two embedrt builds on the same cases: how a kernel change is kept or dropped.

Each round runs every case once with each binary (`embedrt bench --json`), the order of the two
alternating from round to round so that a drift of the shared machine falls on both alike; a
case's result is the median of its per-round ratios B/A with their interquartile range, the form
the commit messages quote. Both binaries read the same generated model (--synthetic-file in
--work, made once by A and reused) and get the same arguments, so they rotate through as many id
sets and output buffers; each case prints its regime and its rows touched against the LLC as
`embedrt bench` measured them, so a "dram" case is one.

Both binaries run from copies made here, in --work, the same way: a binary as the linker left it
ran a bag case 0.93x as fast as a `cp` of itself (f16 768 bags of 32 from memory, 1 thread, 4
rounds; another case 1.03x), so comparing a fresh build with a copied one measured where the files
lay, not the code.

    python3 bench/ab.py OLD/embedrt NEW/embedrt --work /tmp/ab --rounds 5 \\
        --case "bf16 768 + pos -> bf16: --synthetic 1400000x768 --dtype bf16 --positions 1024 --out-dtype bf16 --id-sets 160"

A case is "NAME: ARGS" (ARGS as `embedrt bench` takes them; --synthetic-file, --json, --threads and
--seconds are added). --b-args gives B more arguments, so that one binary measures an option
against its default (`ab.py E E --b-args "--prefetch-level l2" ...`); --a-args gives A more, so
that a default is measured against an option. Nothing here is a test: it
measures, and the reader decides.
"""
import argparse
import hashlib
import json
import os
import shutil
import shlex
import statistics
import subprocess
import sys


def parse_case(text):
    name, sep, rest = text.partition(":")
    if not sep or not name.strip() or not rest.strip():
        sys.exit(f"ab.py: --case '{text}': expected 'NAME: embedrt bench arguments'")
    return name.strip(), shlex.split(rest)


def synthetic_file(work, bench_args):
    """The model file a case's --synthetic arguments generate, named by the flags that shape the
    model, so cases that differ only in how they call it share one file. A flag missing from this
    list cannot make a case measure the wrong model: `embedrt bench` checks a reused
    --synthetic-file against its spec (perf::matches) and refuses a mismatch."""
    model_flags = []
    it = iter(bench_args)
    for flag in it:
        if flag in ("--synthetic", "--dtype", "--positions", "--segments", "--token-scale", "--second-output",
                    "--synthetic-gemma3n"):
            model_flags += [flag, next(it, "")]
        elif flag == "--layer-norm":
            model_flags.append(flag)
    if not any(f.startswith("--synthetic") for f in model_flags):
        return None
    key = hashlib.sha256(" ".join(model_flags).encode()).hexdigest()[:16]
    return os.path.join(work, f"ab-{key}.embt")


def run(cli, bench_args, args):
    cmd = [cli, "bench", "--json", "--threads", str(args.threads), "--seconds", str(args.seconds), *bench_args]
    path = synthetic_file(args.work, bench_args)
    if path:
        cmd += ["--synthetic-file", path]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"ab.py: {' '.join(map(shlex.quote, cmd))} failed ({r.returncode}):\n{r.stderr.strip()}")
    result = json.loads(r.stdout)
    key = "cpu_tokens_per_second" if args.clock == "cpu" else "tokens_per_second"
    return result[key], result


def quartiles(xs):
    if len(xs) < 2:
        return xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", help="the baseline embedrt binary")
    p.add_argument("b", help="the changed embedrt binary")
    p.add_argument("--case", action="append", required=True, help="'NAME: embedrt bench arguments' (repeatable)")
    p.add_argument("--work", required=True, help="folder for the generated models (kept and reused)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=1.0, help="per sample")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                   help="cpu: tokens per CPU second (leaves out time lost to other processes; 1 thread); wall")
    p.add_argument("--a-args", default="", help="more `embedrt bench` arguments for A only, as one string")
    p.add_argument("--b-args", default="", help="more `embedrt bench` arguments for B only, as one string")
    p.add_argument("--json", help="write every sample here")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    cases = [parse_case(c) for c in args.case]
    binaries = {}
    for which, path in (("a", args.a), ("b", args.b)):
        binaries[which] = os.path.join(args.work, f"ab-{which}-embedrt")
        shutil.copyfile(path, binaries[which])
        os.chmod(binaries[which], 0o755)

    samples = {name: {"a": [], "b": [], "meta": None} for name, _ in cases}
    for r in range(args.rounds):
        for name, bench_args in cases:
            order = ("a", "b") if r % 2 == 0 else ("b", "a")
            for which in order:
                cli = binaries[which]
                extra = shlex.split(args.b_args if which == "b" else args.a_args)
                value, result = run(cli, bench_args + extra, args)
                samples[name][which].append(value)
                if samples[name]["meta"] is None:  # the same for every sample of the case
                    samples[name]["meta"] = {k: result.get(k) for k in ("isa", "sizes", "model", "id_sets", "out_sets")}
            s = samples[name]
            print(f"round {r + 1}/{args.rounds} {name}: a {s['a'][-1] / 1e6:.3f} M b {s['b'][-1] / 1e6:.3f} M "
                  f"({s['b'][-1] / s['a'][-1]:.3f}x)", file=sys.stderr, flush=True)

    print(f"A = {args.a} {args.a_args}\nB = {args.b} {args.b_args}\n{args.threads} thread(s), {args.rounds} interleaved rounds, "
          f"{args.clock} clock, {args.seconds} s a sample; B/A = median of the per-round ratios [IQR]\n")
    print("| case | regime | touched / LLC | isa | A M tokens/s | B M tokens/s | B/A [IQR] |")
    print("|---|---|---|---|---|---|---|")
    for name, _ in cases:
        s = samples[name]
        ratios = [b / a for a, b in zip(s["a"], s["b"])]
        lo, hi = quartiles(ratios)
        sizes = s["meta"]["sizes"]
        print(f"| {name} | {sizes['regime']} | {sizes['touched_vs_llc']:.1f} | {s['meta']['isa']} | "
              f"{statistics.median(s['a']) / 1e6:.3f} | {statistics.median(s['b']) / 1e6:.3f} | "
              f"{statistics.median(ratios):.3f}x [{lo:.2f}-{hi:.2f}] |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"a": args.a, "b": args.b, "threads": args.threads, "clock": args.clock,
                       "cases": {n: samples[n] for n, _ in cases}}, f, indent=1)


if __name__ == "__main__":
    main()
