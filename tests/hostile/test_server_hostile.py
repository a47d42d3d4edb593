"""`embedrt serve` against hostile clients and careless operators, as a real process on loopback.

usage: /usr/bin/python3 test_server_hostile.py EMBEDRT_CLI TOOLS_PYTHON_DIR [--sanitized]
(--sanitized: the CLI is a sanitizer build; memory bounds are not checked, everything else is)

Each case starts its own server, plays one attack (bounded in count and time) and asserts the
promise of README's "Reliability" section: no crash, no starvation, bounded memory, a clear
refusal. The figures measured are printed and recorded in tests/hostile/README.md.
"""
import collections
import json
import os
import resource
import select
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
SANITIZED = "--sanitized" in sys.argv[3:]
from embt_writer import write_embt  # noqa: E402

passed = failed = 0
figures = []


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {name}", flush=True)
    else:
        failed += 1
        print(f"FAIL {name}: {detail}", flush=True)


def figure(text):
    figures.append(text)
    print(f"     {text}", flush=True)


VOCAB, DIM = 1000, 64


def table(seed):
    return np.random.default_rng(seed).standard_normal((VOCAB, DIM), dtype=np.float32)


def write_model(path, seed):
    write_embt(path, [("tok", "token", "f32", table(seed))], {"model.family": "llama"})


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process on a free port; stops it on exit and checks it never died by a signal."""

    def __init__(self, model, *args, name="m"):
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log")
        self.proc = subprocess.Popen([CLI, "serve", model, "--port", str(self.port), "--name", name, *args],
                                     stderr=self.log)
        self.name = name
        self.expected_exit = None  # None: must still be running when the case ends
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}: {self.stderr()}")
            try:
                if self.get("/v2/health/live")[0] == 200:
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("server did not come up")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        code = self.proc.poll()
        if self.expected_exit is not None:
            check(f"server exited {self.expected_exit}", code == self.expected_exit, f"exit {code}: {self.stderr()[-400:]}")
        else:
            check("server still running at the end of the case", code is None, f"exit {code}: {self.stderr()[-400:]}")
        if code is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def stderr(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def request(self, method, path, body=None, headers=None, timeout=30):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body, method=method,
                                     headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read(), dict(e.headers)

    def get(self, path):
        return self.request("GET", path, timeout=5)

    def connect(self, timeout=10):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def peak_rss(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM"))


def infer_body(ids):
    ids = np.asarray(ids)
    return json.dumps({"inputs": [{"name": "input_ids", "shape": list(ids.shape), "datatype": "INT64",
                                   "data": ids.flatten().tolist()}]}).encode()


def http_request(path, body=b"", method="POST", extra=b""):
    return (f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n".encode() + extra + b"\r\n" +
            body)


pending = {}  # bytes read past the end of a response (pipelining), by socket


def read_response(sock, timeout=10):
    """One HTTP response (status, headers text, body) from a socket, or None when it closed first."""
    sock.settimeout(timeout)
    data = pending.pop(sock, b"")
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    if rest[length:]:
        pending[sock] = rest[length:]
    return int(head.split(b" ")[1]), head.decode(errors="replace"), rest[:length]


def read_all(sock, timeout=10):
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    return data


def closed_by_peer(sock, within):
    """True when the server closes `sock` within `within` seconds (whatever it sends first)."""
    sock.settimeout(within)
    try:
        while sock.recv(65536):
            pass
        return True
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True


def latencies(server, count, ids=((1, 2, 3, 4),)):
    """Sequential small infer requests on one keep-alive connection: sorted seconds, failures."""
    body = http_request(f"/v2/models/{server.name}/infer", infer_body(ids))
    sock = server.connect()
    out, failures = [], 0
    for _ in range(count):
        start = time.perf_counter()
        sock.sendall(body)
        response = read_response(sock)
        out.append(time.perf_counter() - start)
        if response is None or response[0] != 200:
            failures += 1
            sock.close()
            sock = server.connect()
    sock.close()
    return sorted(out), failures


def p99(values):
    return values[min(len(values) - 1, int(len(values) * 0.99))]


# ----------------------------------------------------------------------------------------------
def case_in_place_overwrite(work):
    """cp new.embt served.embt while clients are asking: no crash; 503 while damaged; reloaded after."""
    path, new = os.path.join(work, "served.embt"), os.path.join(work, "new.embt")
    write_model(path, 1)
    write_model(new, 2)
    ids = [[3, 500, 999]]
    with Server(path) as server:
        codes = collections.Counter()
        wrong = []
        stop = threading.Event()

        def client():
            while not stop.is_set():
                status, body, _ = server.request("POST", "/v2/models/m/infer", infer_body(ids), timeout=10)
                codes[status] += 1
                if status == 200:
                    got = np.array(json.loads(body)["outputs"][0]["data"], dtype=np.float32).reshape(len(ids[0]), DIM)
                    if not any(np.array_equal(got, table(s)[ids[0]]) for s in (1, 2)):
                        wrong.append(got)
        threads = [threading.Thread(target=client) for _ in range(3)]
        [t.start() for t in threads]
        data = open(new, "rb").read()
        with open(path, "r+b") as f:  # what cp does: truncate, then write
            f.truncate(0)
            f.flush()
            time.sleep(0.6)
            ready_while_empty = server.get("/v2/health/ready")[0]
            model_ready_while_empty = server.get("/v2/models/m/ready")[0]
            for i in range(0, len(data), 16384):
                f.write(data[i:i + 16384])
                f.flush()
                time.sleep(0.002)
        deadline = time.time() + 5
        while time.time() < deadline and server.get("/v2/health/ready")[0] != 200:
            time.sleep(0.05)
        recovered_after = time.time() - (deadline - 5)
        time.sleep(0.3)
        stop.set()
        [t.join() for t in threads]
        check("in place: the server survives truncation under load", server.proc.poll() is None, server.stderr()[-300:])
        check("in place: not ready while the file is damaged", ready_while_empty == 503 and model_ready_while_empty == 503,
              (ready_while_empty, model_ready_while_empty))
        check("in place: requests meanwhile get 200 or 503, never another status", set(codes) <= {200, 503} and
              codes[503] > 0, codes)
        check("in place: no response mixes in zeros or half-written rows", not wrong, f"{len(wrong)} wrong")
        status, body, _ = server.request("POST", "/v2/models/m/infer", infer_body(ids))
        got = np.array(json.loads(body)["outputs"][0]["data"], dtype=np.float32).reshape(3, DIM) if status == 200 else None
        check("in place: reloaded automatically, serving the new numbers", got is not None and
              np.array_equal(got, table(2)[ids[0]]), status)
        _, metrics, _ = server.get("/metrics")
        check("in place: generation 2 in /metrics", b'embedrt_model_generation{model="m"} 2' in metrics, metrics[:300])
        figure(f"in-place overwrite: {dict(codes)} responses during it; ready again {recovered_after:.2f} s after "
               "the write finished")

        # Replaced by rename: the old mapping is intact and keeps serving until asked to reload.
        write_model(new, 3)
        os.replace(new, path)
        time.sleep(0.6)
        status, body, _ = server.request("POST", "/v2/models/m/infer", infer_body(ids))
        got = np.array(json.loads(body)["outputs"][0]["data"], dtype=np.float32).reshape(3, DIM)
        check("rename: keeps serving the old model", status == 200 and np.array_equal(got, table(2)[ids[0]]))
        server.proc.send_signal(signal.SIGHUP)
        deadline, ok = time.time() + 5, False
        while time.time() < deadline and not ok:
            status, body, _ = server.request("POST", "/v2/models/m/infer", infer_body(ids))
            got = np.array(json.loads(body)["outputs"][0]["data"], dtype=np.float32).reshape(3, DIM)
            ok = np.array_equal(got, table(3)[ids[0]])
            time.sleep(0.05)
        check("rename: SIGHUP switches to the new file", ok)

        # Truncated and left short: stays not ready, keeps running.
        with open(path, "r+b") as f:
            f.truncate(1000)
        time.sleep(0.8)
        status, body, _ = server.request("POST", "/v2/models/m/infer", infer_body(ids))
        check("left short: infer 503 naming the file", status == 503 and b"served.embt" in body, (status, body[:200]))
        check("left short: not ready", server.get("/v2/health/ready")[0] == 503)


def case_slow_and_idle(work):
    """1000 idle and 50 slowloris connections: normal requests keep their latency; deadlines fire."""
    path = os.path.join(work, "m.embt")
    write_model(path, 1)
    with Server(path, "--header-timeout", "3") as server:
        latencies(server, 100)  # warm up
        base, base_failures = latencies(server, 400)
        idle = [server.connect() for _ in range(1000)]
        slow = [server.connect() for _ in range(50)]
        for s in slow:
            s.sendall(b"P")
        stop = threading.Event()

        def drip():  # one more header byte a second, never finishing
            while not stop.wait(1.0):
                for s in slow:
                    try:
                        s.sendall(b"O")
                    except OSError:
                        pass
        dripper = threading.Thread(target=drip)
        dripper.start()
        time.sleep(0.5)
        loaded, loaded_failures = latencies(server, 400)
        stop.set()
        dripper.join()
        bar = max(2 * p99(base), p99(base) + 0.005)
        figure(f"1000 idle + 50 slowloris connections: p99 {p99(loaded) * 1e3:.2f} ms vs {p99(base) * 1e3:.2f} ms "
               f"unloaded (p50 {loaded[len(loaded) // 2] * 1e3:.2f} vs {base[len(base) // 2] * 1e3:.2f} ms)")
        check("slowloris: no normal request fails", base_failures == 0 and loaded_failures == 0,
              (base_failures, loaded_failures))
        check("slowloris: p99 within max(2x, +5 ms) of the unloaded p99", p99(loaded) <= bar,
              f"{p99(loaded) * 1e3:.2f} ms > {bar * 1e3:.2f} ms")
        # The header deadline (3 s from the first byte) closes every slowloris connection with 408.
        got_408 = 0
        for s in slow:
            response = read_response(s, timeout=5)
            got_408 += response is not None and response[0] == 408
        check("slowloris: each gets 408 at --header-timeout", got_408 == 50, f"{got_408} of 50")
        alive = sum(1 for s in idle[:20] if not closed_by_peer(s, 0.01))
        check("idle connections within --idle-timeout stay open", alive == 20, alive)
        for s in idle + slow:
            s.close()
    with Server(path, "--request-timeout", "1", "--idle-timeout", "1") as server:
        s = server.connect()
        s.sendall(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        start = time.time()
        try:  # a byte every 300 ms until the server answers
            while time.time() - start < 5 and not select.select([s], [], [], 0.3)[0]:
                s.sendall(b"[")
        except OSError:
            pass
        response = read_response(s, timeout=3)
        check("slow body: 408 at --request-timeout", response is not None and response[0] == 408 and
              b"--request-timeout" in response[2], response)
        figure(f"slow body cut after {time.time() - start:.2f} s (--request-timeout 1)")
        s.close()
        s = server.connect()
        start = time.time()
        check("idle: closed at --idle-timeout", closed_by_peer(s, 3), "still open after 3 s")
        figure(f"idle connection closed after {time.time() - start:.2f} s (--idle-timeout 1)")
        s.close()


def case_connection_cap(work):
    path = os.path.join(work, "m.embt")
    write_model(path, 1)
    with Server(path, "--max-connections", "20") as server:
        first = [server.connect() for _ in range(20)]
        time.sleep(0.2)
        refused = []
        for _ in range(20):
            s = server.connect()
            response = read_response(s, timeout=5)
            refused.append(response is not None and response[0] == 503 and b"--max-connections" in response[2])
            s.close()
        check("cap: connections past --max-connections get 503 naming the flag", all(refused), refused)
        first[0].sendall(http_request("/v2/models/m/infer", infer_body([[1, 2]])))
        response = read_response(first[0])
        check("cap: the first 20 still work", response is not None and response[0] == 200, response and response[0])
        for s in first:
            s.close()
        time.sleep(0.3)
        check("cap: after they close, new connections work", server.get("/v2/health/ready")[0] == 200)


def case_memory(work):
    path = os.path.join(work, "m.embt")
    write_model(path, 1)
    table_bytes = os.path.getsize(path)
    budget = 256 << 20
    with Server(path, "--max-inflight-bytes", str(budget), "--max-body-bytes", "100000000", "--threads", "4") as server:
        base = server.peak_rss()
        s = server.connect()
        s.sendall(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (64 << 20))
        chunk = b"[" * (1 << 20)
        try:
            for _ in range(64):
                s.sendall(chunk)
        except OSError:
            pass
        response = read_response(s, timeout=30)
        check("64 MiB of '[' within --max-body-bytes: 400 (nesting) or 503 (budget)", response is not None and
              response[0] in (400, 503), response and response[:3])
        s.close()
        # Four concurrent 64k-token requests answered in JSON (~67 MB of text each).
        ids = np.random.default_rng(0).integers(0, VOCAB, (64, 1024))
        body = infer_body(ids)
        results = []

        def ask():
            status, raw, _ = server.request("POST", "/v2/models/m/infer", body, timeout=120)
            results.append(status)
        threads = [threading.Thread(target=ask) for _ in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        peak = server.peak_rss()
        bound = table_bytes + budget + (150 << 20)
        check("memory: 64k-token JSON responses succeed or get 503", set(results) <= {200, 503} and 200 in results,
              results)
        if not SANITIZED:  # AddressSanitizer's shadow memory and quarantine are not the server's
            check("memory: peak RSS <= table + --max-inflight-bytes + 150 MiB", peak <= bound,
                  f"{peak >> 20} MiB > {bound >> 20} MiB")
        figure(f"memory: 64 MiB '[' body then 4 x 64k-token JSON requests ({results}): peak RSS {peak >> 20} MiB "
               f"(idle {base >> 20} MiB; bound {bound >> 20} MiB = table {table_bytes >> 20} MiB + budget "
               f"{budget >> 20} MiB + 150 MiB)")
    with Server(path) as server:
        s = server.connect()
        s.sendall(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (64 << 20))
        response = read_response(s, timeout=10)
        check("64 MiB body with the default limit: 413 before it is read", response is not None and response[0] == 413,
              response and response[:3])
        s.close()
        status, body, _ = server.request("POST", "/v2/models/m/infer", b"[" * 1000000)
        check("1 MB of nesting: 400 naming the depth", status == 400 and b"nests deeper" in body, body[:200])
        peak = server.peak_rss()
        figure(f"memory: default limits, 64 MiB and 1 MB '[' bodies: peak RSS {peak >> 20} MiB")


def case_port_taken(work):
    path = os.path.join(work, "m.embt")
    write_model(path, 1)
    with Server(path) as server:
        start = time.time()
        r = subprocess.run([CLI, "serve", path, "--port", str(server.port)], capture_output=True, text=True, timeout=20)
        check("port taken: the second server exits non-zero saying so", r.returncode != 0 and
              "Address already in use" in r.stderr and f":{server.port}" in r.stderr, (r.returncode, r.stderr[-300:]))
        figure(f"second server on a taken port exited {r.returncode} after {time.time() - start:.2f} s")
        check("port taken: the first keeps serving", server.get("/v2/health/ready")[0] == 200)


def case_protocol(work):
    path = os.path.join(work, "m.embt")
    write_model(path, 1)
    with Server(path, name='we"ird\\name') as server:
        _, metrics, _ = server.get("/metrics")
        check("metrics: label values escaped", b'model="we\\"ird\\\\name"' in metrics, metrics[:200])
    with Server(path, "--drain-timeout", "1") as server:
        s = server.connect()
        one = http_request("/v2/models/m/infer", infer_body([[1, 2]]))
        s.sendall(one * 3)
        responses = [read_response(s) for _ in range(3)]
        check("pipelining: three requests in one send, three answers in order",
              all(r is not None and r[0] == 200 for r in responses), [r and r[0] for r in responses])
        s.close()
        s = server.connect()
        s.sendall(b"POST /v2/repository/models/m/load HTTP/1.1\r\nHost: x\r\n\r\n")
        response = read_response(s)
        check("POST load without Content-Length: 200", response is not None and response[0] == 200, response)
        s.close()
        s = server.connect()
        body = infer_body([[1]])
        s.sendall(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nContent-Length: %d\r\n\r\n"
                  % (len(body), len(body)) + body)
        response = read_response(s)
        check("duplicate Content-Length: 400", response is not None and response[0] == 400, response)
        s.close()
        for literal in (b"NaN", b"Infinity", b"-Infinity"):
            status, raw, headers = server.request("POST", "/v2/models/m/infer", b'{"inputs": [{"name": "input_ids", '
                                                  b'"shape": [1, 1], "datatype": "INT64", "data": [' + literal + b']}]}')
            check(f"JSON {literal.decode()}: 400 with a JSON error", status == 400 and json.loads(raw)["error"] and
                  headers.get("Content-Type") == "application/json", raw[:200])
        status, raw, headers = server.get("/v2/models/%FF%FE/ready")
        check("invalid UTF-8 model name: 404 with valid JSON", status == 404 and json.loads(raw)["error"] and
              headers.get("Content-Type") == "application/json", raw)
        s = server.connect()
        s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 100000 + b"\r\n\r\n")
        response = read_response(s)
        check("100 KB of headers: 431", response is not None and response[0] == 431, response and response[:3])
        s.close()
        s = server.connect()
        s.sendall(b"\x16\x03\x01 garbage \r\n\r\n")
        response = read_response(s)
        check("garbage request line: 400", response is not None and response[0] == 400, response)
        s.close()
        # SIGTERM with a slowloris client connected: exits 0 within the drain deadline.
        slow = server.connect()
        slow.sendall(b"POST /v2/models/m/infer HTTP/1.1\r\nHo")
        time.sleep(0.2)
        start = time.time()
        server.proc.send_signal(signal.SIGTERM)
        try:
            code = server.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        check("SIGTERM with a slow client: exit 0 within --drain-timeout + 2 s", code == 0 and time.time() - start < 3,
              (code, time.time() - start))
        figure(f"SIGTERM with a slowloris client: exit {code} after {time.time() - start:.2f} s (--drain-timeout 1)")
        slow.close()
        server.expected_exit = 0


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    start = time.time()
    with tempfile.TemporaryDirectory() as work:
        for case in (case_in_place_overwrite, case_slow_and_idle, case_connection_cap, case_memory, case_port_taken,
                     case_protocol):
            print(f"== {case.__name__}: {case.__doc__ or ''}".rstrip(), flush=True)
            try:
                case(work)
            except Exception as e:  # a broken case is a failure, never a skip
                import traceback
                traceback.print_exc()
                check(f"{case.__name__} raised", False, repr(e))
    print(f"\n{passed} passed, {failed} failed in {time.time() - start:.0f} s")
    print("figures:\n" + "\n".join(f"  - {f}" for f in figures))
    sys.exit(1 if failed else 0)


main()
