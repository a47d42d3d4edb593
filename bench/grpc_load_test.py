"""Load test of `embedrt serve`: gRPC (grpcio, raw_input_contents) against REST (http.client,
JSON and the binary extension) in the same run, on one server, loopback only, bounded in time.

usage: build/grpc-venv/bin/python bench/grpc_load_test.py [EMBEDRT] [MODEL.embt]
       (./tools/setup-grpc-venv.sh makes the venv; DURATION=3 CLIENTS=8 ROUNDS=3)

Both protocols are driven by the same Python harness (CLIENTS processes, each a closed loop of one
request at a time on one kept-alive connection), so the client's own cost is alike on both sides;
on a 2-core machine the clients share the cores with the server, so absolute figures are the
machine's, and the ratio between rows of one run is what this measures. Rows are interleaved over
ROUNDS rounds and each figure is the median over rounds; every response is checked for the right
shape. Writes bench/results/grpc_load_test.md.
"""
import http.client
import json
import multiprocessing as mp
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import grpc
import numpy as np
from tritonclient.grpc import service_pb2, service_pb2_grpc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMBEDRT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build/release/tools/embedrt")
MODEL = sys.argv[2] if len(sys.argv) > 2 else None
DURATION = float(os.environ.get("DURATION", "3"))
CLIENTS = int(os.environ.get("CLIENTS", "8"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
SHAPES = {"single token (1x1)": (1, 1), "batch (8x128)": (8, 128)}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model(path):
    sys.path.insert(0, os.path.join(ROOT, "tools/python"))
    from embt_writer import write_embt
    tok = np.random.default_rng(0).standard_normal((50257, 768), dtype=np.float32)
    write_embt(path, [("tok", "token", "f32", tok)], {"model.family": "llama"})


def rest_request(ids, binary):
    B, L = ids.shape
    if not binary:
        body = json.dumps({"inputs": [{"name": "input_ids", "shape": [B, L], "datatype": "INT64",
                                       "data": ids.flatten().tolist()}]}).encode()
        return body, {"Content-Type": "application/json"}
    header = json.dumps({"inputs": [{"name": "input_ids", "shape": [B, L], "datatype": "INT64",
                                     "parameters": {"binary_data_size": 8 * ids.size}}],
                         "outputs": [{"name": "embeddings", "parameters": {"binary_data": True}}]}).encode()
    return header + ids.astype("<i8").tobytes(), {"Inference-Header-Content-Length": str(len(header))}


def client(kind, port, shape, seconds, dim, seed, queue):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 50257, shape)
    expected_bytes = ids.size * dim * 4
    latencies, errors = [], 0
    if kind == "grpc":
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", -1)])
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelInferRequest(model_name="model")
        request.inputs.add(name="input_ids", datatype="INT64", shape=list(shape))
        request.raw_input_contents.append(ids.astype("<i8").tobytes())
        send = lambda: len(stub.ModelInfer(request, timeout=30).raw_output_contents[0]) == expected_bytes  # noqa: E731
    else:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        body, headers = rest_request(ids, kind == "rest-binary")

        def send():
            connection.request("POST", "/v2/models/model/infer", body, headers)
            response = connection.getresponse()
            data = response.read()
            if response.status != 200:
                return False
            if kind == "rest-binary":
                n = int(response.getheader("Inference-Header-Content-Length"))
                return len(data) - n == expected_bytes
            return json.loads(data)["outputs"][0]["shape"] == [*shape, dim]
    end = time.perf_counter() + seconds
    while True:
        start = time.perf_counter()
        if start >= end:
            break
        try:
            ok = send()
        except Exception:
            ok = False
        latencies.append(time.perf_counter() - start)
        errors += not ok
    queue.put((latencies, errors))


def skipped(shape):
    """REST JSON on a batch measures Python's json.loads of 786k floats (~2 s a response), not the
    server: left out (bench/load_test.sh measures it with wrk, which does not parse responses)."""
    return ("rest-json",) if shape[0] * shape[1] > 1 else ()


def run_row(kind, port, shape, dim):
    queue = mp.Queue()
    procs = [mp.Process(target=client, args=(kind, port, shape, DURATION, dim, k, queue)) for k in range(CLIENTS)]
    [p.start() for p in procs]
    results = [queue.get() for _ in procs]
    [p.join() for p in procs]
    latencies = sorted(x for r in results for x in r[0])
    errors = sum(r[1] for r in results)
    return {"rps": len(latencies) / DURATION, "p50": latencies[len(latencies) // 2] * 1000,
            "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000, "errors": errors}


def main():
    with tempfile.TemporaryDirectory() as work:
        model = MODEL
        if model is None:
            model = os.path.join(work, "model.embt")
            make_model(model)
        port, grpc_port = free_port(), free_port()
        log = open(os.path.join(work, "server.log"), "w")
        server = subprocess.Popen([EMBEDRT, "serve", model, "--name", "model", "--port", str(port),
                                   "--grpc-port", str(grpc_port), "--threads", "16"], stderr=log)
        try:
            deadline = time.time() + 30
            while time.time() < deadline:
                try:
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                    c.request("GET", "/v2/health/ready")
                    if c.getresponse().status == 200:
                        break
                except OSError:
                    time.sleep(0.1)
            dim = 768
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/v2/models/model")
            dim = json.loads(c.getresponse().read())["outputs"][0]["shape"][-1]
            kinds = {"rest-json": port, "rest-binary": port, "grpc": grpc_port}
            samples = {(s, k): [] for s in SHAPES for k in kinds}
            for _ in range(ROUNDS):
                for shape_name, shape in SHAPES.items():
                    for kind, p in kinds.items():
                        if kind in skipped(shape):
                            continue
                        samples[(shape_name, kind)].append(run_row(kind, p, shape, dim))
        finally:
            server.terminate()
            code = server.wait(timeout=30)
            log.close()
    lines = [f"# embedrt serve: gRPC vs REST (loopback, {CLIENTS} client processes, {DURATION:g} s per row, "
             f"{ROUNDS} interleaved rounds, medians; model 50257x{dim} f32, --threads 16)", "",
             "| load | protocol | requests/s | p50 | p99 | failed | requests/s vs REST binary |",
             "|---|---|---|---|---|---|---|"]
    names = {"rest-json": "REST, JSON", "rest-binary": "REST, binary extension", "grpc": "gRPC, raw contents"}
    for shape_name in SHAPES:
        median = {k: {m: statistics.median(r[m] for r in samples[(shape_name, k)]) for m in ("rps", "p50", "p99")}
                  for k in kinds if samples[(shape_name, k)]}
        for kind in kinds:
            if kind in skipped(SHAPES[shape_name]):
                continue
            m = median[kind]
            failed = sum(r["errors"] for r in samples[(shape_name, kind)])
            lines.append(f"| {shape_name} | {names[kind]} | {m['rps']:.0f} | {m['p50']:.2f} ms | {m['p99']:.2f} ms | "
                         f"{failed} | {m['rps'] / median['rest-binary']['rps']:.2f}x |")
    lines += ["", "REST JSON is measured for single tokens only: on a batch this Python client spends ~2 s "
              "parsing each response's 786k floats (bench/load_test.sh measures REST JSON with wrk).",
              "", f"Server exit code after SIGTERM: {code}. Machine: {os.cpu_count()} cores, shared; "
              "clients and server on the same cores."]
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench/results/grpc_load_test.md"), "w") as f:
        f.write(text)
    sys.exit(0 if code == 0 else 1)


if __name__ == "__main__":
    main()
