"""Do N `embedrt serve` processes on one model file share one copy of its table?

Starts 1, then N servers on the same model (per residency mode), makes each read every row of
the table (requests for all ids, binary output), then reads each process's memory from
/proc/PID/smaps_rollup: Rss counts every page a process maps, Pss divides each shared page
among the processes mapping it. Shared tables show as Pss ~ table / N per process and a total
Pss ~ one table; private copies as Pss ~ Rss ~ one table each. Writes a markdown table.

usage: python3 bench/pss_sharing.py EMBEDRT_CLI [--processes 4] [--modes mmap,populate,copy]
                                    [--out bench/results/pss_sharing.md]
"""
import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

parser = argparse.ArgumentParser()
parser.add_argument("cli")
parser.add_argument("--processes", type=int, default=4)
parser.add_argument("--modes", default="mmap,populate,copy")
parser.add_argument("--shape", default="50257x768", help="the generated model: VOCABxDIM, f32, no positions")
parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "pss_sharing.md"))
args = parser.parse_args()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rollup(pid):
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return fields


def touch_every_row(port, vocab):
    """Requests every id once, in chunks, with binary output (no JSON numbers to print)."""
    chunk = 8192
    for begin in range(0, vocab, chunk):
        ids = list(range(begin, min(vocab, begin + chunk)))
        header = json.dumps({"inputs": [{"name": "input_ids", "shape": [1, len(ids)], "datatype": "INT64",
                                         "parameters": {"binary_data_size": 8 * len(ids)}}],
                             "outputs": [{"name": "embeddings", "parameters": {"binary_data": True}}]}).encode()
        body = header + struct.pack(f"<{len(ids)}q", *ids)
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/m/infer", data=body, method="POST",
                                     headers={"Inference-Header-Content-Length": str(len(header))})
        with urllib.request.urlopen(req, timeout=60) as r:
            r.read()
            if r.status != 200:
                raise RuntimeError(f"infer returned {r.status}")


def start(model, mode):
    port = free_port()
    proc = subprocess.Popen([args.cli, "serve", model, "--name", "m", "--port", str(port), "--threads", "1",
                             "--residency", mode], stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=5) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("server did not become ready")


def measure(model, mode, n, vocab):
    servers = [start(model, mode) for _ in range(n)]
    try:
        for _, port in servers:
            touch_every_row(port, vocab)
        return [rollup(p.pid) for p, _ in servers]
    finally:
        for p, _ in servers:
            p.terminate()
            p.wait(timeout=30)


def main():
    vocab, dim = (int(x) for x in args.shape.split("x"))
    with tempfile.TemporaryDirectory(prefix="embedrt-pss-") as work:
        model = os.path.join(work, "m.embt")
        subprocess.run([args.cli, "bench", "--synthetic", args.shape, "--synthetic-file", model,
                        "--batch", "1", "--seq", "1", "--seconds", "0.01"], check=True, capture_output=True)
        table = os.path.getsize(model)
        lines = [f"# Memory of N `embedrt serve` processes on one model ({args.shape} f32, {table / 2**20:.0f} MiB file)", "",
                 "Each server read every row (requests for all ids) before its memory was read from "
                 "/proc/PID/smaps_rollup. Pss shares each page among the processes mapping it.", "",
                 "| residency | processes | Rss per process | Pss per process | Pss of all processes | total / one table |",
                 "|---|---|---|---|---|---|"]
        for mode in args.modes.split(","):
            for n in sorted({1, args.processes}):
                mem = measure(model, mode, n, vocab)
                rss = sum(m["Rss"] for m in mem) / n
                pss = sum(m["Pss"] for m in mem)
                lines.append(f"| {mode} | {n} | {rss / 2**20:.0f} MiB | {pss / n / 2**20:.0f} MiB | {pss / 2**20:.0f} MiB | "
                             f"{pss / table:.2f} |")
                print(lines[-1], file=sys.stderr, flush=True)
    report = "\n".join(lines)
    print(report)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(report + "\n")


main()
