"""`embedrt serve` over real HTTP on loopback.

usage: /usr/bin/python3 test_server.py EMBEDRT_CLI TOOLS_PYTHON_DIR
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import numpy as np

CLI = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from embt_writer import write_embt  # noqa: E402
from served_model import DIM, VOCAB, Tally, expected, free_port, write_model  # noqa: E402

tally = Tally()
check = tally.check


class Server:
    def __init__(self, model, *extra):
        self.port = free_port()
        self.proc = subprocess.Popen([CLI, "serve", model, "--port", str(self.port), *extra],
                                     stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                if self.get("/v2/health/ready")[0] == 200:
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("server did not become ready")

    def request(self, method, path, body=None, headers=None):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read(), dict(e.headers)

    def get(self, path):
        return self.request("GET", path)

    def infer(self, doc, name="model"):
        status, body, _ = self.request("POST", f"/v2/models/{name}/infer", json.dumps(doc).encode(),
                                       {"Content-Type": "application/json"})
        return status, json.loads(body)


def ids_input(ids, datatype="INT64"):
    ids = np.asarray(ids)
    return {"name": "input_ids", "shape": list(ids.shape), "datatype": datatype, "data": ids.flatten().tolist()}


def embeddings(doc):
    out = doc["outputs"][0]
    return np.array(out["data"], dtype=np.float64).astype(np.float32).reshape(out["shape"])


def test_endpoints(server, seed):
    status, body, _ = server.get("/v2/health/live")
    check("live", status == 200 and json.loads(body)["live"] is True, body)
    status, body, _ = server.get("/v2/models/model")
    meta = json.loads(body)
    check("metadata", status == 200 and meta["name"] == "model" and meta["outputs"][0]["shape"] == [-1, -1, DIM] and
          [i["name"] for i in meta["inputs"]] == ["input_ids", "position_start", "token_type_ids"], body)
    ids = [[1, 2, 3], [97, 98, 99]]
    status, doc = server.infer({"id": "r1", "inputs": [ids_input(ids)]})
    check("infer JSON", status == 200 and doc["id"] == "r1" and doc["outputs"][0]["datatype"] == "FP32" and
          np.array_equal(embeddings(doc), expected(seed, ids)), doc if status != 200 else "values differ")
    segments, starts = [[0, 1, 1], [1, 0, 1]], [4, 29]
    status, doc = server.infer({"inputs": [ids_input(ids, "INT32"),
                                           {"name": "position_start", "shape": [2], "datatype": "INT64", "data": starts},
                                           {"name": "token_type_ids", "shape": [2, 3], "datatype": "INT64", "data": segments}]})
    check("infer with starts and token types", status == 200 and
          np.array_equal(embeddings(doc), expected(seed, ids, starts, segments)), doc)
    # Binary tensor extension: a JSON header, then raw little-endian tensors, both ways.
    header = json.dumps({"inputs": [{"name": "input_ids", "shape": [2, 3], "datatype": "INT64",
                                     "parameters": {"binary_data_size": 48}}],
                         "outputs": [{"name": "embeddings", "parameters": {"binary_data": True}}]}).encode()
    body = header + np.asarray(ids, dtype="<i8").tobytes()
    status, raw, headers = server.request("POST", "/v2/models/model/infer", body,
                                          {"Inference-Header-Content-Length": str(len(header))})
    n = int(headers.get("Inference-Header-Content-Length", -1))
    ok = status == 200 and n > 0
    if ok:
        head = json.loads(raw[:n])
        values = np.frombuffer(raw[n:], dtype="<f4").reshape(head["outputs"][0]["shape"])
        ok = np.array_equal(values, expected(seed, ids))
    check("binary mode", ok, raw[:200])


def test_routes(server, seed):
    status, body, _ = server.get("/v2")
    meta = json.loads(body)
    check("server metadata", status == 200 and meta["name"] == "embedrt" and meta["version"] and
          "binary_tensor_data" in meta["extensions"], body)
    status, body, _ = server.get("/v2/models/model/versions/1")
    check("versioned model metadata", status == 200 and json.loads(body)["name"] == "model", body)
    status, body, _ = server.get("/v2/models/model/versions/1/ready")
    check("versioned ready", status == 200 and json.loads(body)["ready"] is True, body)
    status, body, _ = server.get("/v2/models/model/versions/2/ready")
    check("unknown version -> 404", status == 404 and b"has no version '2'" in body, body)
    ids = [[3, 4]]
    status, body, _ = server.request("POST", "/v2/models/model/versions/1/infer",
                                     json.dumps({"inputs": [ids_input(ids)]}).encode())
    check("versioned infer", status == 200 and np.array_equal(embeddings(json.loads(body)), expected(seed, ids)), body)
    status, body, headers = server.request("GET", "/v2/models/model/infer")
    check("wrong method -> 405 with Allow", status == 405 and headers.get("Allow") == "POST" and
          json.loads(body)["error"], (status, body))
    status, body, _ = server.get("/v2/models/%zz/ready")
    check("malformed percent-escape -> 400", status == 400 and b"percent-escape" in body, body)


def test_non_finite_json(work):
    """JSON cannot carry NaN or Infinity: a JSON response refuses them, binary output carries them."""
    path = os.path.join(work, "nan.embt")
    tok = np.ones((4, 2), dtype=np.float32)
    tok[1, 0], tok[2, 1] = np.nan, np.inf
    write_embt(path, [("tok", "token", "f32", tok)], {"model.family": "llama"})
    server = Server(path)
    try:
        status, body, _ = server.request("POST", "/v2/models/nan/infer", json.dumps({"inputs": [ids_input([[0, 1]])]}).encode())
        check("NaN in a JSON response -> refused, naming binary output", status == 500 and b"binary_data_output" in body and
              b"NaN" in body, body)
        status, body, _ = server.request("POST", "/v2/models/nan/infer", json.dumps({"inputs": [ids_input([[0]])]}).encode())
        check("finite values still answer in JSON", status == 200, body)
        header = json.dumps({"inputs": [ids_input([[1, 2]])], "parameters": {"binary_data_output": True}}).encode()
        status, raw, headers = server.request("POST", "/v2/models/nan/infer", header)
        n = int(headers.get("Inference-Header-Content-Length", -1))
        values = np.frombuffer(raw[n:], dtype="<f4") if status == 200 else None
        check("binary output carries NaN and Infinity", values is not None and np.isnan(values[0]) and np.isinf(values[3]),
              raw[:200])
        status, body, _ = server.request("POST", "/v2/models/nan/infer", b'{"inputs": [{"name": "input_ids", "shape": [1, 1], '
                                         b'"datatype": "INT64", "data": [NaN]}]}')
        check("NaN in a request -> 400", status == 400 and b"not valid JSON" in body, body)
    finally:
        server.proc.kill()
        server.proc.wait()


def test_bad_requests(server):
    cases = [
        (b"{not json", 400, "body is not valid JSON"),
        (json.dumps({"inputs": []}).encode(), 400, 'no \\"input_ids\\" tensor'),
        (json.dumps({"inputs": [{"name": "input_ids", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}).encode(),
         400, "datatype FP32 is not INT32 or INT64"),
        (json.dumps({"inputs": [ids_input([[1, 2]]) | {"shape": [1, 3]}]}).encode(), 400,
         "shape holds 3 values but data has 2"),
        (json.dumps({"inputs": [ids_input([1, 2])]}).encode(), 400, "shape must be [batch, length]"),
        (json.dumps({"inputs": [ids_input([[1, 200]])]}).encode(), 400,
         "input_ids: sequence 0, position 1: id 200 is out of range [0, 100)"),
        (json.dumps({"inputs": [ids_input([[1, -3]])]}).encode(), 400, "id -3 is out of range"),
        (json.dumps({"inputs": [ids_input([[1, 2]]), {"name": "position_start", "shape": [1], "datatype": "INT64",
                                                     "data": [31]}]}).encode(), 400,
         "position_start: sequence 0, position 1: position 32 is past the limit of 32 positions"),
        (json.dumps({"inputs": [ids_input([[1, 2]]), {"name": "token_type_ids", "shape": [1, 2], "datatype": "INT64",
                                                     "data": [0, 5]}]}).encode(), 400,
         "token_type_ids: sequence 0, position 1: segment 5 is out of range [0, 2)"),
        (json.dumps({"inputs": [ids_input([[1] * 3000])]}).encode(), 400, "exceed --max-batch-tokens 2048"),
        (json.dumps({"inputs": [ids_input([[1, 2]]) | {"name": "mystery"}, ids_input([[1, 2]])]}).encode(), 400,
         "unknown input"),
        (b"x" * 300000, 413, "larger than --max-body-bytes 200000"),
    ]
    for body, status, needle in cases:
        got, raw, _ = server.request("POST", "/v2/models/model/infer", body, {"Content-Type": "application/json"})
        check(f"bad request -> {status}: {needle}", got == status and needle in raw.decode(errors="replace"),
              f"{got} {raw[:200]!r}")
    got, raw, _ = server.request("POST", "/v2/models/other/infer", b"{}")
    check("unknown model -> 404", got == 404 and b"not served here" in raw, raw)


def test_concurrency(server, seed):
    def worker(k):
        rng = np.random.default_rng(k)
        for _ in range(20):
            ids = rng.integers(0, VOCAB, (2, 5))
            status, doc = server.infer({"inputs": [ids_input(ids)]})
            check(f"concurrent request {k}", status == 200 and np.array_equal(embeddings(doc), expected(seed, ids)),
                  "a response does not match its own request")
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]


def test_reload(server, model):
    ids = [[5, 6, 7]]
    write_model(model, 2)
    server.proc.send_signal(signal.SIGHUP)
    deadline, ok = time.time() + 10, False
    while time.time() < deadline and not ok:
        status, doc = server.infer({"inputs": [ids_input(ids)]})
        ok = status == 200 and np.array_equal(embeddings(doc), expected(2, ids))
        time.sleep(0.05)
    check("SIGHUP swaps in the replaced file", ok)
    # A damaged replacement is refused; the previous model keeps serving.
    with open(model, "rb") as f:
        data = bytearray(f.read())
    data[8192 + 10] ^= 0xFF  # a byte of table data: caught by the checksums
    with open(model + ".tmp", "wb") as f:
        f.write(data)
    os.replace(model + ".tmp", model)
    status, body, _ = server.request("POST", "/v2/repository/models/model/load", b"")
    check("load endpoint refuses a damaged file", status == 400 and b"checksum" in body, body)
    server.proc.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    status, doc = server.infer({"inputs": [ids_input(ids)]})
    check("the old model keeps serving", status == 200 and np.array_equal(embeddings(doc), expected(2, ids)))
    write_model(model, 3)
    status, body, _ = server.request("POST", "/v2/repository/models/model/load", b"")
    status2, doc = server.infer({"inputs": [ids_input(ids)]})
    check("load endpoint swaps a good file", status == 200 and np.array_equal(embeddings(doc), expected(3, ids)), body)
    # Reloads under load: every response is entirely one generation's, never a mix.
    stop = threading.Event()
    seen = set()

    def client():
        while not stop.is_set():
            status, doc = server.infer({"inputs": [ids_input(ids)]})
            got = embeddings(doc) if status == 200 else None
            match = [s for s in (3, 4) if got is not None and np.array_equal(got, expected(s, ids))]
            check("response during reloads is one whole model", len(match) == 1, status)
            seen.update(match)
    threads = [threading.Thread(target=client) for _ in range(4)]
    [t.start() for t in threads]
    for k in range(6):
        write_model(model, 3 + (k + 1) % 2)
        server.proc.send_signal(signal.SIGHUP)
        time.sleep(0.15)
    stop.set()
    [t.join() for t in threads]
    check("both generations served during reloads", seen == {3, 4}, seen)
    status, body, _ = server.get("/metrics")
    text = body.decode()
    check("metrics", status == 200 and 'embedrt_requests_total{model="model"}' in text and
          "embedrt_request_duration_seconds_bucket" in text and 'embedrt_failed_reloads_total{model="model"} 2' in text,
          text[:500])


def test_sigterm(server):
    # A request truly in flight: headers and half the body sent, then SIGTERM, then the rest.
    ids = [[1, 2, 3]]
    body = json.dumps({"inputs": [ids_input(ids)]}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=20)
    sock.sendall(b"POST /v2/models/model/infer HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                 b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body[:10])
    time.sleep(0.3)
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    check("SIGTERM: the server waits for the in-flight request", server.proc.poll() is None)
    sock.sendall(body[10:])
    response = b""
    while chunk := sock.recv(65536):
        response += chunk
    sock.close()
    check("SIGTERM: in-flight request finishes", response.startswith(b"HTTP/1.1 200"), response[:100])
    code = server.proc.wait(timeout=20)
    check("SIGTERM: exit 0", code == 0, code)
    try:
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
        check("SIGTERM: no longer accepting", False)
    except OSError:
        check("SIGTERM: no longer accepting", True)


def test_copy_residency(work):
    """--residency copy: the served copy outlives a truncation and a rewrite in place; it keeps
    serving (ready) until a reload asks for the new file. (With --prefetch-level l2 and
    --min-rows-ahead 64, which change no number: the kernels of both levels and distances are
    checked against the reference in embedrt_tests.)"""
    path = os.path.join(work, "copy.embt")
    write_model(path, 1)
    server = Server(path, "--residency", "copy", "--threads", "2", "--prefetch-level", "l2",
                    "--min-rows-ahead", "64")
    try:
        ids = [[5, 6, 7]]
        status, doc = server.infer({"inputs": [ids_input(ids)]}, name="copy")
        check("copy: serves", status == 200 and np.array_equal(embeddings(doc), expected(1, ids)), status)
        write_model(path + ".other", 5)
        with open(path + ".other", "rb") as f:
            other = f.read()
        os.truncate(path, 4096)  # what cp does first
        time.sleep(0.6)  # two ticks of the file watch
        status, doc = server.infer({"inputs": [ids_input(ids)]}, name="copy")
        ready = server.get("/v2/health/ready")[0]
        check("copy: a truncated file changes nothing served", status == 200 and ready == 200 and
              np.array_equal(embeddings(doc), expected(1, ids)), (status, ready))
        with open(path, "r+b") as f:  # then the rest of cp: the new bytes, same inode
            f.write(other)
        time.sleep(0.6)
        status, doc = server.infer({"inputs": [ids_input(ids)]}, name="copy")
        check("copy: a file rewritten in place still serves the copy",
              status == 200 and server.get("/v2/health/ready")[0] == 200 and
              np.array_equal(embeddings(doc), expected(1, ids)), status)
        status, body, _ = server.request("POST", "/v2/repository/models/copy/load", b"")
        status2, doc = server.infer({"inputs": [ids_input(ids)]}, name="copy")
        check("copy: a reload copies the new file", status == 200 and status2 == 200 and
              np.array_equal(embeddings(doc), expected(5, ids)), body)
    finally:
        server.proc.kill()
        log = server.proc.communicate(timeout=20)[1]
    check("copy: the log says the file changed and the copy serves",
          "residency copy" in log and "changed in place" in log and "from its copy" in log, log[-800:])
    # The level and distance the kernels use, resolved: l2 and 64 rows were asked, but a table this
    # small stays in the cache (L1, 4 rows).
    check("copy: the log names the prefetch level and distance in use",
          "residency copy, prefetch l1, rows ahead 4)" in log, log[-800:])
    r = subprocess.run([CLI, "serve", path, "--residency", "huge", "--port", str(free_port())],
                       capture_output=True, text=True, timeout=20)
    check("an unknown --residency is a usage error naming it", r.returncode == 2 and "huge" in r.stderr, r.stderr)
    r = subprocess.run([CLI, "serve", path, "--prefetch-level", "l3", "--port", str(free_port())],
                       capture_output=True, text=True, timeout=20)
    check("an unknown --prefetch-level is a usage error naming it", r.returncode == 2 and "l3" in r.stderr, r.stderr)
    for rows in ("3", "257"):
        r = subprocess.run([CLI, "serve", path, "--min-rows-ahead", rows, "--port", str(free_port())],
                           capture_output=True, text=True, timeout=20)
        check(f"--min-rows-ahead {rows} is a usage error naming it",
              r.returncode == 2 and "--min-rows-ahead" in r.stderr and rows in r.stderr, r.stderr)


with tempfile.TemporaryDirectory() as work:
    model = os.path.join(work, "model.embt")
    write_model(model, 1)
    server = Server(model, "--max-batch-tokens", "2048", "--max-body-bytes", "200000", "--threads", "8")
    try:
        for test in (lambda: test_endpoints(server, 1), lambda: test_routes(server, 1), lambda: test_bad_requests(server),
                     lambda: test_concurrency(server, 1), lambda: test_reload(server, model), lambda: test_sigterm(server)):
            try:
                test()
            except Exception as e:
                check("test raised", False, repr(e))
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    for test in (test_non_finite_json, test_copy_residency):
        try:
            test(work)
        except Exception as e:
            check("test raised", False, repr(e))
    r = subprocess.run([CLI, "serve", os.path.join(work, "missing.embt"), "--port", str(free_port())],
                       capture_output=True, text=True, timeout=20)
    check("a missing model exits 3 (bad input) with a message", r.returncode == 3 and "missing.embt" in r.stderr, r.stderr)

tally.finish()
