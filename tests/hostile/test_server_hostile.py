"""`embedrt serve` against hostile clients and careless operators, each attack on a real process.

usage: /usr/bin/python3 test_server_hostile.py EMBEDRT_CLI TOOLS_PYTHON_DIR [--sanitized] [CASE ...]

--sanitized: the CLI is a sanitizer build, whose RSS (shadow memory, quarantine) is not the
server's own: the peak-RSS bounds are reported, not checked; everything else is.

CASE: run only the cases whose name contains one of these words (default: all). Cases:
overwrite, slowloris, header-timeout, request-timeout, idle-timeout, max-connections,
memory-body-limit, memory-nesting, memory-inflight, port, protocol, prometheus, sigterm-slowloris,
sigterm-inflight, headers.

Written against the server's contract (tests/hostile/README.md, section "server"), not against
any one implementation. Every case starts its own server on a free loopback port, plays one
bounded attack, and also asserts that the server is still alive at the end of the case (or exited
as the case expected), never died by a signal, and exits 0 on SIGTERM. Prints one PASS/FAIL line
per check and a summary table; exits 1 if any check failed.
"""
import http.client
import json
import math
import os
import re
import resource
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import numpy as np

CLI = os.path.abspath(sys.argv[1])
sys.path.insert(0, sys.argv[2])
SANITIZED = "--sanitized" in sys.argv[3:]
SELECTED = [word for word in sys.argv[3:] if word != "--sanitized"]
from embt_writer import write_embt  # noqa: E402

HOST = "127.0.0.1"
MiB = 1 << 20

# ---------------------------------------------------------------------------------------------
# Results


class Results:
    def __init__(self):
        self.rows = []  # (case, check, ok, detail)
        self.figures = []  # (case, text)
        self.lock = threading.Lock()

    def check(self, case, name, ok, detail=""):
        detail = str(detail)
        with self.lock:
            self.rows.append((case, name, bool(ok), detail))
        print(f"{'PASS' if ok else 'FAIL'} [{case}] {name}" + (f": {detail}" if detail and not ok else ""), flush=True)
        return bool(ok)

    def figure(self, case, text):
        with self.lock:
            self.figures.append((case, text))
        print(f"     [{case}] {text}", flush=True)

    def summary(self):
        width_case = max([len(r[0]) for r in self.rows] + [4])
        width_check = min(max([len(r[1]) for r in self.rows] + [5]), 70)
        print("\n" + "=" * 100)
        print(f"{'case':<{width_case}}  {'check':<{width_check}}  result  detail")
        print("-" * 100)
        for case, name, ok, detail in self.rows:
            short = detail.replace("\n", " | ")
            short = short if len(short) <= 160 else short[:157] + "..."
            print(f"{case:<{width_case}}  {name[:width_check]:<{width_check}}  {'PASS' if ok else 'FAIL':<6}  "
                  f"{short if not ok else ''}")
        if self.figures:
            print("-" * 100 + "\nmeasured:")
            for case, text in self.figures:
                print(f"  [{case}] {text}")
        failed = sum(1 for r in self.rows if not r[2])
        print("=" * 100)
        print(f"{len(self.rows) - failed} passed, {failed} failed")
        return failed


R = Results()

# ---------------------------------------------------------------------------------------------
# Models


def tables(seed, vocab, dim):
    return np.random.default_rng(seed).standard_normal((vocab, dim), dtype=np.float32)


def write_model(path, seed, vocab=100, dim=16):
    """A token table only: an embedding is the table's row, exactly (no position, no segment)."""
    write_embt(path, [("tok", "token", "f32", tables(seed, vocab, dim))], {"model.family": "bert"})


def model_bytes(workdir, seed, vocab=100, dim=16):
    path = os.path.join(workdir, f"scratch-{seed}-{vocab}-{dim}.embt")
    write_model(path, seed, vocab, dim)
    with open(path, "rb") as f:
        data = f.read()
    os.unlink(path)
    return data


def expected(seed, ids, vocab=100, dim=16):
    return tables(seed, vocab, dim)[np.asarray(ids)]


def ids_input(ids):
    ids = np.asarray(ids)
    return {"name": "input_ids", "shape": list(ids.shape), "datatype": "INT64", "data": ids.flatten().tolist()}


def infer_body(ids, request_id=None):
    doc = {"inputs": [ids_input(ids)]}
    if request_id is not None:
        doc["id"] = request_id
    return json.dumps(doc).encode()


def embeddings_of(body):
    """The FP32 output of an infer response body, or None when it is not one."""
    try:
        doc = json.loads(body)
        out = doc["outputs"][0]
        return np.array(out["data"], dtype=np.float64).astype(np.float32).reshape(out["shape"])
    except Exception:
        return None


def matches(body, seed, ids, vocab=100, dim=16):
    got = embeddings_of(body)
    return got is not None and got.shape == np.asarray(ids).shape + (dim,) and \
        np.array_equal(got, expected(seed, ids, vocab, dim))


# ---------------------------------------------------------------------------------------------
# HTTP helpers


class Resp:
    def __init__(self, status, headers, body, header_list=()):
        self.status, self.headers, self.body, self.header_list = status, headers, body, list(header_list)

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def __repr__(self):
        return f"<{self.status} {self.body[:200]!r}>"


def call(port, method, path, body=None, headers=None, timeout=10):
    """One request on a fresh connection (http.client); returns Resp. Raises OSError on failure."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        hdrs = {"Content-Type": "application/json"} if body is not None else {}
        hdrs.update(headers or {})
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        data = r.read()
        return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, data, r.getheaders())
    finally:
        conn.close()


def infer(port, ids, name="model", timeout=10, request_id=None):
    return call(port, "POST", f"/v2/models/{name}/infer", infer_body(ids, request_id), timeout=timeout)


LEAK = re.compile(r"exception|std::|boost::|what\(\)|terminate called|beast::|asio", re.I)
LEAKS = {}  # case -> error texts that leak internals (checked once per case, see main)
CURRENT = ["?"]


def json_error_problem(resp, statuses=None):
    """None if resp is a proper error: status in statuses (if given), Content-Type application/json,
    a strict-UTF-8 JSON object {"error": "<non-empty>"}, no leaked exception text or internal
    header. Otherwise a description of what is wrong."""
    if resp is None:
        return "no response"
    if statuses is not None and resp.status not in statuses:
        return f"status {resp.status}, expected one of {sorted(statuses)}; body {resp.body[:200]!r}"
    ctype = resp.headers.get("content-type", "")
    if not ctype.lower().startswith("application/json"):
        return f"Content-Type {ctype!r}, not application/json; body {resp.body[:200]!r}"
    try:
        doc = json.loads(resp.body.decode("utf-8"))
    except Exception as e:
        return f"body is not valid (UTF-8) JSON ({e}): {resp.body[:200]!r}"
    if not isinstance(doc, dict) or not isinstance(doc.get("error"), str) or not doc["error"]:
        return f"body is not {{\"error\": \"...\"}}: {resp.body[:200]!r}"
    if LEAK.search(doc["error"]):  # reported once per case by main(), not by the check that saw it
        LEAKS.setdefault(CURRENT[0], []).append(doc["error"][:200])
    for k, _ in resp.header_list:
        if "exception" in k.lower() or "what" == k.lower():
            return f"internal header leaked: {k}"
    return None


class Closed(Exception):
    pass


class RawConn:
    """A raw TCP connection for crafted requests; responses parsed by hand (Content-Length,
    chunked, or to EOF). Every blocking operation is bounded by a timeout."""

    def __init__(self, port, timeout=5.0, rcvbuf=None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect((HOST, port))
        self.buf = b""
        self.eof = False

    def send(self, data):
        """False when the peer has closed or reset the connection."""
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            return False

    def _recv(self, deadline):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout("deadline")
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(1 << 20)
        except (ConnectionResetError, ConnectionAbortedError):
            chunk = b""
        if not chunk:
            self.eof = True
            raise Closed()
        self.buf += chunk

    def _until(self, marker, deadline):
        while marker not in self.buf:
            self._recv(deadline)
        i = self.buf.index(marker)
        out, self.buf = self.buf[:i], self.buf[i + len(marker):]
        return out

    def _take(self, n, deadline):
        while len(self.buf) < n:
            self._recv(deadline)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_response(self, timeout=10.0, head_request=False):
        """Resp, or raises Closed (EOF/reset before a whole response) / socket.timeout."""
        deadline = time.monotonic() + timeout
        head = self._until(b"\r\n\r\n", deadline).decode("latin-1")
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise ValueError(f"bad status line {lines[0]!r}")
        status = int(parts[1])
        header_list = [tuple(x.strip() for x in line.split(":", 1)) for line in lines[1:] if ":" in line]
        headers = {k.lower(): v for k, v in header_list}
        if head_request or status in (204, 304) or 100 <= status < 200:
            body = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = b""
            while True:
                size = int(self._until(b"\r\n", deadline).split(b";")[0], 16)
                if size == 0:
                    self._until(b"\r\n", deadline)  # (no trailers expected)
                    break
                body += self._take(size, deadline)
                self._take(2, deadline)
        elif "content-length" in headers:
            body = self._take(int(headers["content-length"]), deadline)
        else:
            try:
                while True:
                    self._recv(deadline)
            except Closed:
                pass
            body, self.buf = self.buf, b""
        return Resp(status, headers, body, header_list)

    def wait_closed(self, timeout):
        """Waits up to timeout for the server to close (EOF or reset). Returns (closed, seconds,
        bytes received meanwhile)."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        got = b""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False, time.monotonic() - t0, got
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(1 << 16)
            except socket.timeout:
                return False, time.monotonic() - t0, got
            except (ConnectionResetError, ConnectionAbortedError):
                return True, time.monotonic() - t0, got
            if not chunk:
                return True, time.monotonic() - t0, got
            got += chunk

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def request_bytes(method, path, body=b"", headers=None, keep_alive=True):
    lines = [f"{method} {path} HTTP/1.1", f"Host: {HOST}"]
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    if body or method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def parse_response_bytes(data):
    """Parses the first response in bytes already received (for a connection that then closed)."""
    if not data:
        return None
    fake = RawConn.__new__(RawConn)
    fake.buf, fake.eof = data, True

    class _NoSock:
        def settimeout(self, t):
            pass

        def recv(self, n):
            return b""
    fake.sock = _NoSock()
    try:
        return fake.read_response(timeout=1)
    except Exception:
        return None


def readable(sock, timeout):
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(int(timeout * 1000)))


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def percentile(values, q):
    v = sorted(values)
    return v[max(0, math.ceil(q * len(v)) - 1)]


def measure_latency(fn, n, pace=0.0):
    """Runs fn() n times in sequence, starting one every `pace` seconds (at most); returns
    (latencies in seconds, failures as strings)."""
    lat, failures = [], []
    next_start = time.perf_counter()
    for i in range(n):
        delay = next_start - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        next_start += pace
        t0 = time.perf_counter()
        try:
            problem = fn()
        except Exception as e:
            problem = repr(e)
        lat.append(time.perf_counter() - t0)
        if problem:
            failures.append(f"#{i}: {problem}")
    return lat, failures


def vm_kib(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def describe_exit(code):
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"


def metric(text, name):
    m = re.search(r"^" + re.escape(name) + r"(\{[^}]*\})? (\S+)$", text, re.M)
    return float(m.group(2)) if m else None


# ---------------------------------------------------------------------------------------------
# The server under test


class Server:
    """Starts `embedrt serve MODEL --port P --host 127.0.0.1 --name NAME ARGS...`, waits for
    /v2/health/live, captures stdout+stderr to a temp file. On exit: if the case did not expect
    the server to stop, asserts it is alive, sends SIGTERM and asserts exit 0 within the drain
    timeout + 5 s; always asserts it never died by a signal; kills it if still running."""

    def __init__(self, case, model, *args, name="model", expect_exit=False, wait_live=True):
        self.case, self.model, self.args, self.name = case, model, [str(a) for a in args], name
        self.expect_exit, self.wait_live = expect_exit, wait_live
        if "--drain-timeout" not in self.args:
            self.args += ["--drain-timeout", "2"]  # keeps every case's shutdown short
        self.drain = float(self.args[self.args.index("--drain-timeout") + 1])
        self.proc = None

    def __enter__(self):
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(prefix=f"embedrt-serve-{self.case}-", suffix=".log", delete=False)
        cmd = [CLI, "serve", self.model, "--port", str(self.port), "--host", HOST, "--name", self.name, *self.args]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        self.pid = self.proc.pid
        if self.wait_live:
            deadline = time.monotonic() + 20
            while True:
                if self.proc.poll() is not None:
                    self._cleanup()
                    raise RuntimeError(f"server {describe_exit(self.proc.returncode)} before it was live: "
                                       f"{self.log_tail()}")
                try:
                    if call(self.port, "GET", "/v2/health/live", timeout=2).status == 200:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    self._cleanup()
                    raise RuntimeError(f"server not live after 20 s: {self.log_tail()}")
                time.sleep(0.05)
        return self

    def log_tail(self, n=600):
        try:
            with open(self.log.name, "rb") as f:
                data = f.read()
            return data[-n:].decode(errors="replace").strip().replace("\n", " | ")
        except OSError:
            return ""

    def alive(self):
        return self.proc.poll() is None

    def rss_hwm_mib(self):
        kib = vm_kib(self.pid, "VmHWM")
        return None if kib is None else kib / 1024

    def get(self, path, timeout=10):
        return call(self.port, "GET", path, timeout=timeout)

    def metrics(self):
        return self.get("/metrics").body.decode(errors="replace")

    def __exit__(self, exc_type, exc, tb):
        try:
            code = self.proc.poll()
            if not self.expect_exit:
                if code is not None:
                    R.check(self.case, "server alive at the end of the case", False,
                            f"{describe_exit(code)}; log: {self.log_tail()}")
                else:
                    R.check(self.case, "server alive at the end of the case", True)
                    self.proc.send_signal(signal.SIGTERM)
                    try:
                        code = self.proc.wait(timeout=self.drain + 5)
                        R.check(self.case, "SIGTERM at the end: exit 0", code == 0,
                                f"{describe_exit(code)}; log: {self.log_tail()}" if code else "")
                    except subprocess.TimeoutExpired:
                        R.check(self.case, "SIGTERM at the end: exit 0", False,
                                f"still running {self.drain + 5} s after SIGTERM (killed)")
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=10)
            code = self.proc.returncode
            killed_by_us = code == -signal.SIGKILL and not self.expect_exit
            R.check(self.case, "server never died by a signal", code >= 0 or killed_by_us,
                    f"{describe_exit(code)}; log: {self.log_tail()}")
        finally:
            self._cleanup()
        return False

    def _cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


class InferLoop(threading.Thread):
    """A client sending the same infer request in a loop; classifies every answer as one of the
    known models' numbers ('seed N'), a proper 503/5xx JSON error, or a problem."""

    def __init__(self, port, ids, seeds, vocab, dim, file_name):
        super().__init__(daemon=True)
        self.port, self.ids, self.seeds, self.vocab, self.dim, self.file_name = port, ids, seeds, vocab, dim, file_name
        self.stop = threading.Event()
        self.log = []  # (time, label)
        self.problems = []

    def run(self):
        while not self.stop.is_set():
            t = time.monotonic()
            try:
                r = infer(self.port, self.ids, timeout=10)
            except Exception as e:
                self.log.append((t, "connection error"))
                self.problems.append(f"connection error: {e!r}")
                time.sleep(0.05)
                continue
            self.log.append((t, classify(r, self.seeds, self.ids, self.vocab, self.dim, self.file_name,
                                         self.problems)))


def classify(r, seeds, ids, vocab, dim, file_name, problems):
    if r.status == 200:
        for s in seeds:
            if matches(r.body, s, ids, vocab, dim):
                return f"seed {s}"
        got = embeddings_of(r.body)
        rows = "unparsable"
        if got is not None and got.shape == np.asarray(ids).shape + (dim,):
            flat_ids, flat_got = np.asarray(ids).reshape(-1), got.reshape(-1, dim)
            rows = [next((f"seed {s}" for s in seeds if np.array_equal(flat_got[k], tables(s, vocab, dim)[t])),
                         "no model") for k, t in enumerate(flat_ids)]
        problems.append(f"200 with numbers of no single known model; token rows come from: {rows}")
        return "wrong numbers"
    if 500 <= r.status < 600:
        problem = json_error_problem(r)
        if problem is None and r.status != 503 and file_name not in r.body.decode(errors="replace"):
            problem = f"{r.status} error that is not 503 and does not name {file_name}: {r.body[:200]!r}"
        if problem:
            problems.append(problem)
            return "bad error"
        return "5xx"
    problems.append(f"unexpected status {r.status}: {r.body[:200]!r}")
    return f"status {r.status}"


def probe_ready(port, name="model"):
    out = []
    for path in ("/v2/health/ready", f"/v2/models/{name}/ready"):
        try:
            out.append(call(port, "GET", path, timeout=5).status)
        except OSError:
            out.append(None)
    return out


def await_numbers(port, seed, ids, V, D, since, within=3.5):
    """When the server first answered ready (both endpoints 200) with model `seed`'s numbers,
    polling until `within` seconds after `since`; None if it never did."""
    while time.monotonic() < since + within:
        if probe_ready(port) == [200, 200] and matches(infer(port, ids).body, seed, ids, V, D):
            return time.monotonic()
        time.sleep(0.05)
    return None


def advanced(before, after):
    """Whether a metric read twice (None: absent) went up."""
    return before is not None and after is not None and after > before


# ---------------------------------------------------------------------------------------------
# Cases


def case_overwrite(work):
    case = "overwrite"
    V, D = 4000, 32  # 512 KB of table: the rewrite takes ~3 s in 24 chunks
    path = os.path.join(work, "served.embt")
    base = os.path.basename(path)
    write_model(path, 11, V, D)
    new_bytes = {s: model_bytes(work, s, V, D) for s in (12, 13, 14, 15, 16)}
    ids = [[1, 2, 3], [V - 1, 5, 7]]  # rows from the front and the back of the table
    seeds = (11, 12, 13, 14, 15, 16)
    with Server(case, path) as s:
        r = infer(s.port, ids)
        R.check(case, "baseline infer returns the served model's numbers", matches(r.body, 11, ids, V, D), r)
        gen0 = metric(s.metrics(), "embedrt_model_generation")
        R.check(case, "/metrics has embedrt_model_generation", gen0 is not None, s.metrics()[:300])
        client = InferLoop(s.port, ids, seeds, V, D, base)
        client.start()
        try:
            # --- A. cp-style in-place rewrite: truncate to 0, then the new bytes slowly.
            time.sleep(0.3)
            probes = []  # (t, ready statuses, infer label)
            problems = []
            data = new_bytes[12]
            chunks = 24
            step = math.ceil(len(data) / chunks)
            t_trunc = time.monotonic()
            with open(path, "r+b") as f:
                f.truncate(0)
                f.flush()
                for i in range(chunks):
                    time.sleep(0.125)
                    f.write(data[i * step:(i + 1) * step])
                    f.flush()
                    probes.append((time.monotonic(), probe_ready(s.port),
                                   classify(infer(s.port, ids), seeds, ids, V, D, base, problems)))
            t_done = time.monotonic()
            damaged = [p for p in probes[:-1]]
            saw_503 = [p for p in damaged if 503 in p[1]]
            R.check(case, "in-place rewrite: ready answers 503 while the file is damaged", len(saw_503) > 0,
                    f"ready statuses during the rewrite: {[p[1] for p in damaged]}")
            R.check(case, "in-place rewrite: both ready endpoints agree (503) while damaged",
                    all(p[1] == [503, 503] for p in saw_503), [p[1] for p in damaged])
            first_503 = saw_503[0][0] if saw_503 else t_done
            R.check(case, "in-place rewrite: damage detected within 1 s of the truncation",
                    first_503 - t_trunc <= 1.0, f"first ready 503 after {first_503 - t_trunc:.2f} s")
            after = [lab for (t, lab) in client.log if first_503 <= t < t_done] + \
                    [p[2] for p in damaged if p[0] >= first_503]
            R.check(case, "in-place rewrite: once damage is seen, infer answers only 503/5xx JSON until the file is whole",
                    after and all(lab == "5xx" for lab in after),
                    f"answers: {sorted(set(after))}; problems: {problems[:3]}")
            # --- reload of the completed file
            t_ok = await_numbers(s.port, 12, ids, V, D, since=t_done)
            R.check(case, "in-place rewrite: reloaded automatically within ~3 s (ready 200, the NEW numbers)",
                    t_ok is not None, f"log: {s.log_tail()}")
            if t_ok:
                R.figure(case, f"in-place rewrite: ready again {t_ok - t_done:.2f} s after the last byte; "
                               f"first ready 503 {first_503 - t_trunc:.2f} s after the truncation")
            gen1 = metric(s.metrics(), "embedrt_model_generation")
            R.check(case, "in-place rewrite: embedrt_model_generation incremented",
                    advanced(gen0, gen1), f"{gen0} -> {gen1}")

            # --- A2. same size, no truncation (dd conv=notrunc): the old bytes are overwritten in
            # place, front to back. A server that maps the file and serves from the mapping would
            # answer rows of two models mixed in one response; none may be seen.
            problems = []
            labels = []
            gen_a = metric(s.metrics(), "embedrt_model_generation")
            data = new_bytes[16]
            assert len(data) == len(new_bytes[12])
            with open(path, "r+b") as f:
                for i in range(chunks):
                    time.sleep(0.125)
                    f.write(data[i * step:(i + 1) * step])
                    f.flush()
                    labels.append(classify(infer(s.port, ids), seeds, ids, V, D, base, problems))
            t_done = time.monotonic()
            R.check(case, "same-size overwrite without truncation: every answer is one whole model or a 5xx JSON error",
                    not problems, f"{problems[:2]}; answers {labels}")
            t_ok = await_numbers(s.port, 16, ids, V, D, since=t_done)
            gen_b = metric(s.metrics(), "embedrt_model_generation")
            R.check(case, "same-size overwrite: reloaded within ~3 s with the new numbers, generation +1",
                    t_ok is not None and advanced(gen_a, gen_b),
                    f"reloaded={t_ok is not None}, generation {gen_a} -> {gen_b}")
            data = new_bytes[12]

            # --- B. truncated and left short for 3 s, then rewritten whole in place.
            with open(path, "r+b") as f:
                f.truncate(len(data) // 2)
            t_trunc = time.monotonic()
            held = []
            while time.monotonic() < t_trunc + 3.0:
                held.append((time.monotonic(), probe_ready(s.port),
                             infer(s.port, ids)))
                time.sleep(0.1)
            settled = [h for h in held if h[0] >= t_trunc + 1.0]  # 1 s allowed to notice
            bad = [(round(h[0] - t_trunc, 2), h[1], h[2].status) for h in settled
                   if h[1] != [503, 503] or h[2].status != 503]
            R.check(case, "truncated and left short: ready, model ready and infer all 503 (after 1 s grace)",
                    settled and not bad, f"not 503 at (t, ready, infer): {bad[:5]}")
            infer_errors = [json_error_problem(h[2]) for h in settled if h[2].status != 200]
            named = [h for h in settled if base in h[2].body.decode(errors="replace")]
            R.check(case, "truncated: infer errors are JSON {\"error\": ...} with Content-Type application/json",
                    settled and all(p is None for p in infer_errors), [p for p in infer_errors if p][:2])
            R.figure(case, f"truncated: {len(named)}/{len(settled)} infer errors name {base}, e.g. "
                           f"{settled[0][2].body[:160] if settled else b''!r}")
            gen1 = metric(s.metrics(), "embedrt_model_generation")
            with open(path, "r+b") as f:
                f.truncate(0)
                f.write(new_bytes[13])
            t_done = time.monotonic()
            t_ok = await_numbers(s.port, 13, ids, V, D, since=t_done)
            gen2 = metric(s.metrics(), "embedrt_model_generation")
            R.check(case, "truncated then restored: reloaded within ~3 s with the new numbers, generation +1",
                    t_ok is not None and advanced(gen1, gen2),
                    f"reloaded={t_ok is not None}, generation {gen1} -> {gen2}")

            # --- C. atomic rename: the old model keeps serving until POST load.
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(new_bytes[14])
            os.replace(tmp, path)
            t0 = time.monotonic()
            kept = []
            while time.monotonic() < t0 + 3.5:
                kept.append((probe_ready(s.port), matches(infer(s.port, ids).body, 13, ids, V, D)))
                time.sleep(0.2)
            R.check(case, "rename: the old model (old numbers) keeps serving, ready 200, for 3.5 s",
                    all(k == ([200, 200], True) for k in kept), kept)
            g_before = metric(s.metrics(), "embedrt_model_generation")
            r = call(s.port, "POST", f"/v2/repository/models/model/load", b"")
            r2 = infer(s.port, ids)
            g_after = metric(s.metrics(), "embedrt_model_generation")
            R.check(case, "rename: POST .../load -> 200 and the new numbers, generation +1",
                    r.status == 200 and matches(r2.body, 14, ids, V, D) and advanced(g_before, g_after),
                    f"load {r}; generation {g_before} -> {g_after}")
            # --- D. rename + SIGHUP
            with open(tmp, "wb") as f:
                f.write(new_bytes[15])
            os.replace(tmp, path)
            s.proc.send_signal(signal.SIGHUP)
            ok = False
            t0 = time.monotonic()
            while time.monotonic() < t0 + 3 and not ok:
                ok = matches(infer(s.port, ids).body, 15, ids, V, D)
                time.sleep(0.05)
            R.check(case, "rename + SIGHUP: the new numbers within 3 s", ok)
        finally:
            client.stop.set()
            client.join(timeout=15)
        counts = {}
        for _, lab in client.log:
            counts[lab] = counts.get(lab, 0) + 1
        R.figure(case, f"background client: {len(client.log)} requests: {counts}")
        R.check(case, "background client: every answer is a known model's numbers or a proper 5xx JSON error",
                not client.problems, client.problems[:3])


class Dripper(threading.Thread):
    """Slowloris: sends the next byte of an endless header to each connection every `interval`
    seconds; notes when the server closes each one (and any bytes it sent first)."""

    PAYLOAD = b"POST /v2/models/model/infer HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100000

    def __init__(self, port, n, interval):
        super().__init__(daemon=True)
        self.interval = interval
        self.conns = []
        self.t0 = []
        for _ in range(n):
            c = RawConn(port)
            self.t0.append(time.monotonic())
            c.send(self.PAYLOAD[:1])
            c.sock.setblocking(False)
            self.conns.append(c)
        self.closed = [None] * n  # seconds from the first byte to the close
        self.received = [b""] * n
        self.pos = 1
        self.error = None
        self.stop = threading.Event()

    def _poll(self):
        open_socks = {c.sock.fileno(): i for i, c in enumerate(self.conns) if self.closed[i] is None}
        if not open_socks:
            return
        poller = select.poll()  # not select(): descriptors go past 1024 here
        for fd in open_socks:
            poller.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
        for fd, _ in poller.poll(0):
            i = open_socks[fd]
            try:
                chunk = self.conns[i].sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if chunk:
                self.received[i] += chunk
            else:
                self.closed[i] = time.monotonic() - self.t0[i]

    def run(self):
        try:
            self._run()
        except Exception as e:  # reported by the case through self.error
            self.error = repr(e)

    def _run(self):
        while not self.stop.is_set():
            for i, c in enumerate(self.conns):
                if self.closed[i] is None:
                    try:
                        c.sock.send(self.PAYLOAD[self.pos:self.pos + 1])
                    except BlockingIOError:
                        pass
                    except OSError:
                        self.closed[i] = time.monotonic() - self.t0[i]
            self.pos += 1
            end = time.monotonic() + self.interval
            while time.monotonic() < end and not self.stop.is_set():
                self._poll()
                time.sleep(0.02)

    def close(self):
        self.stop.set()
        self.join(timeout=5)
        for c in self.conns:
            c.close()


def case_slowloris(work):
    case = "slowloris"
    path = os.path.join(work, "slow.embt")
    write_model(path, 21)
    ids = [[1, 2, 3, 4]]

    with Server(case, path) as s:
        def one():
            r = infer(s.port, ids, timeout=10)
            if r.status != 200 or not matches(r.body, 21, ids):
                return f"{r.status} {r.body[:100]!r}"
            return None
        # Paced at one request per 15 ms (3 s for 200) both times, so that the loaded run spans
        # several slowloris drips (a byte a second) rather than finishing between two of them.
        measure_latency(one, 30)  # warm up
        base, base_fail = measure_latency(one, 200, pace=0.015)
        R.check(case, "unloaded: 200 infer requests succeed", not base_fail, base_fail[:3])
        idle, connect_fail, dripper = [], [], None
        try:
            for i in range(1000):
                try:
                    c = RawConn(s.port, timeout=5)
                    if i % 2:
                        c.send(request_bytes("GET", "/v2/health/live"))
                        r = c.read_response(timeout=5)
                        if r.status != 200:
                            connect_fail.append(f"#{i}: {r.status}")
                    idle.append(c)
                except Exception as e:
                    connect_fail.append(f"#{i}: {e!r}")
            R.check(case, "1000 idle keep-alive connections accepted (500 after one request each)",
                    not connect_fail, f"{len(connect_fail)} failed: {connect_fail[:3]}")
            dripper = Dripper(s.port, 50, 1.0)
            dripper.start()
            time.sleep(0.5)
            loaded, load_fail = measure_latency(one, 200, pace=0.015)
            open_now = metric(s.metrics(), "embedrt_open_connections")
            R.check(case, "the slowloris client kept dripping (harness)", dripper.error is None and dripper.pos >= 3,
                    f"error {dripper.error}; {dripper.pos} bytes sent per connection")
            R.figure(case, f"during the loaded run: {sum(c is None for c in dripper.closed)}/50 slowloris connections "
                           f"open ({dripper.pos} bytes sent each); embedrt_open_connections = {open_now}")
            p99_0, p99_1 = percentile(base, 0.99), percentile(loaded, 0.99)
            bar = max(2 * p99_0, p99_0 + 0.005)
            R.figure(case, f"unloaded p50 {percentile(base, .5) * 1e3:.2f} ms p99 {p99_0 * 1e3:.2f} ms; with 1000 idle + "
                           f"50 slowloris: p50 {percentile(loaded, .5) * 1e3:.2f} ms p99 {p99_1 * 1e3:.2f} ms; "
                           f"bar max(2 x p99, p99 + 5 ms) = {bar * 1e3:.2f} ms (the +5 ms absorbs noise on a shared machine)")
            R.check(case, "under 1000 idle + 50 slowloris: none of 200 requests fails", not load_fail, load_fail[:3])
            R.check(case, "under load: p99 <= max(2 x unloaded p99, unloaded p99 + 5 ms)", p99_1 <= bar,
                    f"p99 {p99_1 * 1e3:.2f} ms > bar {bar * 1e3:.2f} ms")
            # the idle keep-alive connections still work
            sample_fail = []
            for c in [idle[i] for i in range(1, 1000, 100) if i < len(idle)]:
                try:
                    if not c.send(request_bytes("GET", "/v2/health/live")):
                        sample_fail.append("closed")
                        continue
                    r = c.read_response(timeout=5)
                    if r.status != 200:
                        sample_fail.append(r.status)
                except Exception as e:
                    sample_fail.append(repr(e))
            R.check(case, "idle keep-alive connections still answer a second request", not sample_fail, sample_fail)
        finally:
            if dripper:
                dripper.close()
            for c in idle:
                c.close()


def case_header_timeout(work):
    case = "header-timeout"
    path = os.path.join(work, "ht.embt")
    write_model(path, 31)
    with Server(case, path, "--header-timeout", "1") as s:
        d = Dripper(s.port, 50, 0.5)
        d.start()
        try:
            t0 = time.monotonic()
            while time.monotonic() < t0 + 4.5 and any(c is None for c in d.closed):
                time.sleep(0.1)
        finally:
            d.close()
        R.check(case, "the slowloris client ran (harness)", d.error is None, d.error)
        closed = [c for c in d.closed if c is not None]
        late = [round(c, 2) for c in closed if c > 3.0]
        R.check(case, "50 slowloris connections closed by --header-timeout 1 within 3 s of their first byte",
                len(closed) == 50 and not late,
                f"{len(closed)}/50 closed; late: {late[:5]}")
        if closed:
            R.figure(case, f"slowloris closed after {min(closed):.2f}-{max(closed):.2f} s (--header-timeout 1)")
        bad = []
        for data in d.received:
            if data:
                r = parse_response_bytes(data)
                if r is None or r.status != 408:
                    bad.append(data[:80])
        R.check(case, "whatever a slowloris connection got before the close is a 408", not bad, bad[:3])
        r = infer(s.port, [[1, 2]])
        R.check(case, "a normal request still works afterwards", matches(r.body, 31, [[1, 2]]), r)


def case_request_timeout(work):
    case = "request-timeout"
    path = os.path.join(work, "rt.embt")
    V, D = 1000, 64
    write_model(path, 41, V, D)
    with Server(case, path, "--request-timeout", "1") as s:
        # slow body
        c = RawConn(s.port)
        try:
            c.send(b"POST /v2/models/model/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: 1000\r\n\r\n")
            t0 = time.monotonic()
            c.sock.setblocking(False)
            got, closed_at = b"", None
            while time.monotonic() < t0 + 4.5 and closed_at is None:
                try:
                    c.sock.send(b"[")
                except BlockingIOError:
                    pass
                except OSError:
                    closed_at = time.monotonic() - t0
                    break
                end = time.monotonic() + 0.3
                while time.monotonic() < end and closed_at is None:
                    if readable(c.sock, max(0.0, end - time.monotonic())):
                        try:
                            chunk = c.sock.recv(65536)
                        except OSError:
                            chunk = b""
                        if chunk:
                            got += chunk
                        else:
                            closed_at = time.monotonic() - t0
        finally:
            c.close()
        resp = parse_response_bytes(got)
        R.check(case, "slow body (a byte per 300 ms) cut with 408 within 1 + 2 s",
                resp is not None and resp.status == 408 and closed_at is not None and closed_at <= 3.0,
                f"response {resp}, closed after {closed_at if closed_at is None else round(closed_at, 2)} s")
        if resp is not None and resp.status == 408:
            R.check(case, "408 body is a JSON error", json_error_problem(resp) is None, json_error_problem(resp))
        if closed_at is not None:
            R.figure(case, f"slow body: connection closed {closed_at:.2f} s after the headers (--request-timeout 1)")
        # slow reader: a ~45 MB response never read; the server must give up writing it
        ids = (np.arange(65536) % V).reshape(1, -1)
        c = RawConn(s.port, rcvbuf=4096)
        try:
            c.send(request_bytes("POST", "/v2/models/model/infer", infer_body(ids), {"Content-Type": "application/json"}))
            time.sleep(5.0)
            total, cut = 0, False
            c.sock.settimeout(3)
            t_read = time.monotonic()
            try:
                while time.monotonic() < t_read + 10:
                    chunk = c.sock.recv(1 << 20)
                    if not chunk:
                        cut = True
                        break
                    total += len(chunk)
            except (ConnectionResetError, ConnectionAbortedError):
                cut = True
            except socket.timeout:
                pass
        finally:
            c.close()
        R.check(case, "slow reader: the server stops writing a response nobody reads (connection closed)",
                cut and total < 40 * MiB, f"read {total / MiB:.1f} MiB afterwards, closed={cut}")
        R.figure(case, f"slow reader: {total / MiB:.1f} MiB still delivered after 5 s of not reading; closed={cut}")
        r = infer(s.port, [[1, 2]])
        R.check(case, "a normal request still works afterwards", matches(r.body, 41, [[1, 2]], V, D), r)


def case_idle_timeout(work):
    case = "idle-timeout"
    path = os.path.join(work, "it.embt")
    write_model(path, 51)
    with Server(case, path, "--idle-timeout", "1") as s:
        a = RawConn(s.port)
        b = RawConn(s.port)
        busy = None
        try:
            a.send(request_bytes("GET", "/v2/health/live"))
            r = a.read_response(timeout=5)
            closed, secs, extra = a.wait_closed(4)
            R.check(case, "keep-alive connection idle after a request is closed within 1 + 2 s",
                    r.status == 200 and closed and secs <= 3.0, f"closed={closed} after {secs:.2f} s; got {extra[:80]!r}")
            if closed:
                R.figure(case, f"idle keep-alive connection closed {secs:.2f} s after its response (--idle-timeout 1)")
            closed, secs, extra = b.wait_closed(4)
            R.check(case, "a connection that never sends a byte is closed within ~1 + 2 s", closed and secs <= 3.2,
                    f"closed={closed} after {secs:.2f} s")
            # a busy keep-alive connection is not cut: a request every 0.5 s for 3 s
            busy = RawConn(s.port)
            fails = []
            for i in range(6):
                if not busy.send(request_bytes("GET", "/v2/health/live")):
                    fails.append(f"#{i}: closed")
                    break
                try:
                    r = busy.read_response(timeout=5)
                    if r.status != 200:
                        fails.append(f"#{i}: {r.status}")
                except Exception as e:
                    fails.append(f"#{i}: {e!r}")
                    break
                time.sleep(0.5)
            R.check(case, "a keep-alive connection used every 0.5 s stays open for 3 s", not fails, fails)
        finally:
            for c in (a, b, busy):
                if c is not None:
                    c.close()


def case_max_connections(work):
    case = "max-connections"
    path = os.path.join(work, "mc.embt")
    write_model(path, 61)
    with Server(case, path, "--max-connections", "20") as s:
        first, extra = [], []
        try:
            fails = []
            for i in range(20):
                c = RawConn(s.port)
                first.append(c)
                c.send(request_bytes("GET", "/v2/health/live"))
                try:
                    r = c.read_response(timeout=5)
                    if r.status != 200:
                        fails.append(f"#{i}: {r.status}")
                except Exception as e:
                    fails.append(f"#{i}: {e!r}")
            R.check(case, "the first 20 connections are served", not fails, fails[:3])
            refused, bad = 0, []
            for i in range(20):
                t0 = time.monotonic()
                try:
                    c = RawConn(s.port, timeout=3)
                except OSError as e:  # refused at connect: also fine
                    refused += 1
                    continue
                extra.append(c)
                c.send(request_bytes("GET", "/v2/health/live"))
                try:
                    r = c.read_response(timeout=3)
                    problem = json_error_problem(r, {503})
                    if problem:
                        bad.append(f"#{i}: {problem}")
                    else:
                        refused += 1
                        closed, secs, _ = c.wait_closed(2)
                        if not closed:
                            bad.append(f"#{i}: 503 but the connection stays open")
                except Closed:
                    refused += 1
                except socket.timeout:
                    bad.append(f"#{i}: no answer and not closed after {time.monotonic() - t0:.1f} s")
                except Exception as e:
                    bad.append(f"#{i}: {e!r}")
            R.check(case, "connections 21-40: 503 JSON error (then closed) or closed promptly",
                    refused == 20 and not bad, f"{refused}/20 refused; {bad[:3]}")
            fails = []
            for i, c in enumerate(first):
                try:
                    if not c.send(request_bytes("POST", "/v2/models/model/infer", infer_body([[i, 1]]),
                                                {"Content-Type": "application/json"})):
                        fails.append(f"#{i}: closed")
                        continue
                    r = c.read_response(timeout=5)
                    if not matches(r.body, 61, [[i, 1]]):
                        fails.append(f"#{i}: {r}")
                except Exception as e:
                    fails.append(f"#{i}: {e!r}")
            R.check(case, "the first 20 still work (an infer each on the same connection)", not fails, fails[:3])
        finally:
            for c in first + extra:
                c.close()
        time.sleep(0.5)
        again, fails = [], []
        try:
            for i in range(20):
                try:
                    c = RawConn(s.port)
                    again.append(c)
                    c.send(request_bytes("GET", "/v2/health/live"))
                    r = c.read_response(timeout=5)
                    if r.status != 200:
                        fails.append(f"#{i}: {r.status}")
                except Exception as e:
                    fails.append(f"#{i}: {e!r}")
        finally:
            for c in again:
                c.close()
        R.check(case, "after they close, 20 new simultaneous connections work", not fails, fails[:3])


def send_body_and_read(port, head, body_len, fill=b"[", chunk=MiB, timeout=30):
    """Sends `head` then body_len bytes of `fill` from a thread while reading the response
    concurrently (the server may answer and close before the body is sent). Returns
    (Resp or None, seconds to the response, note)."""
    c = RawConn(port, timeout=timeout)
    piece = fill * chunk
    state = {"sent": 0, "error": None}

    def sender():
        try:
            c.sock.sendall(head)
            left = body_len
            while left > 0:
                n = min(left, len(piece))
                c.sock.sendall(piece[:n])
                left -= n
                state["sent"] += n
        except OSError as e:
            state["error"] = repr(e)
    t = threading.Thread(target=sender, daemon=True)
    t0 = time.monotonic()
    t.start()
    try:
        r = c.read_response(timeout=timeout)
        secs = time.monotonic() - t0
    except (Closed, socket.timeout, ValueError) as e:
        r, secs = None, time.monotonic() - t0
        state["error"] = (state["error"] or "") + f" read: {e!r}"
    finally:
        try:
            c.sock.shutdown(socket.SHUT_RDWR)  # stops the sender; then close
        except OSError:
            pass
        t.join(timeout=10)
        c.close()
    return r, secs, f"sent {state['sent'] / MiB:.1f} MiB of the body; {state['error'] or ''}"


def post_head(path, length):
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def case_memory_body_limit(work):
    case = "memory-body-limit"
    path = os.path.join(work, "mb.embt")
    write_model(path, 71)
    with Server(case, path) as s:
        r, secs, note = send_body_and_read(s.port, post_head("/v2/models/model/infer", 64 * MiB), 64 * MiB)
        R.check(case, "64 MiB of '[' over the default body limit -> 413 JSON error",
                r is not None and json_error_problem(r, {413}) is None,
                f"{json_error_problem(r, {413})}; {note}")
        R.figure(case, f"64 MiB body: answered after {secs:.2f} s ({note.strip()}); peak RSS {s.rss_hwm_mib():.1f} MiB")
        r, secs, note = send_body_and_read(s.port, post_head("/v2/models/model/infer", MiB), MiB)
        R.check(case, "1 MB of '[' (within the limit) -> 400 JSON error within 2 s",
                r is not None and json_error_problem(r, {400}) is None and secs <= 2.0,
                f"{json_error_problem(r, {400})}; {secs:.2f} s; {note}")
        R.figure(case, f"1 MB of '[': 400 after {secs:.2f} s; peak RSS {s.rss_hwm_mib():.1f} MiB")
        r = infer(s.port, [[3, 4]])
        R.check(case, "a normal request still works afterwards", matches(r.body, 71, [[3, 4]]), r)


def case_memory_nesting(work):
    """64 MiB of '[' inside --max-body-bytes: the contract asks for 400 (a nesting error). Played
    twice: with the default 1 GiB in-flight budget (a request that needs more than the whole
    budget must not be told 503 'retry later': it can never succeed), and with an 8 GiB budget,
    so that the JSON parser's depth limit itself is reached."""
    case = "memory-nesting"
    path = os.path.join(work, "mn.embt")
    write_model(path, 72)
    file_mib = os.path.getsize(path) / MiB
    for budget in (None, 8 << 30):
        extra = ["--max-inflight-bytes", budget] if budget else []
        label = f"--max-inflight-bytes {budget}" if budget else "default --max-inflight-bytes (1 GiB)"
        budget_mib = (budget or 1 << 30) / MiB
        with Server(case, path, "--max-body-bytes", "100000000", *extra) as s:
            r, secs, note = send_body_and_read(s.port, post_head("/v2/models/model/infer", 64 * MiB), 64 * MiB,
                                               timeout=60)
            problem = json_error_problem(r, {400})
            text = r.body.decode(errors="replace") if r is not None else ""
            R.check(case, f"{label}: 64 MiB of '[' within --max-body-bytes 100000000 -> 400 JSON error about "
                          f"nesting/depth", problem is None and re.search(r"nest|depth|deep", text, re.I),
                    f"{problem or text[:200]}; {note}")
            hwm = s.rss_hwm_mib()
            bound = file_mib + budget_mib + 150
            R.figure(case, f"{label}: 64 MiB nesting answered {r.status if r else None} after {secs:.2f} s; peak RSS "
                           f"{hwm:.1f} MiB (bound {bound:.0f} MiB = table + budget + 150 MiB)")
            if not SANITIZED:
                R.check(case, f"{label}: peak RSS below table + budget + 150 MiB",
                        hwm is not None and hwm < bound, f"{hwm} MiB vs {bound:.0f} MiB")
            r = infer(s.port, [[3, 4]])
            R.check(case, f"{label}: a normal request still works afterwards", matches(r.body, 72, [[3, 4]]), r)


def case_memory_inflight(work):
    case = "memory-inflight"
    V, D = 1000, 64
    path = os.path.join(work, "mi.embt")
    write_model(path, 73, V, D)
    budget = 268435456
    ids = (np.arange(65536) * 7 % V).reshape(64, 1024)
    body = infer_body(ids)
    with Server(case, path, "--max-inflight-bytes", budget) as s:
        results = [None] * 4

        def client(k):
            try:
                c = RawConn(s.port, timeout=120)
                try:
                    c.send(request_bytes("POST", "/v2/models/model/infer", body,
                                         {"Content-Type": "application/json"}, keep_alive=False))
                    results[k] = c.read_response(timeout=120)
                finally:
                    c.close()
            except Exception as e:
                results[k] = e
        threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        t0 = time.monotonic()
        [t.start() for t in threads]
        [t.join(timeout=150) for t in threads]
        secs = time.monotonic() - t0
        hwm = s.rss_hwm_mib()
        file_mib = os.path.getsize(path) / MiB
        bound = file_mib + budget / MiB + 150
        outcome, bad, ok = [], [], 0
        exp = expected(73, ids, V, D)
        for k, r in enumerate(results):
            if isinstance(r, Resp) and r.status == 200:
                got = embeddings_of(r.body)
                if got is not None and np.array_equal(got, exp):
                    ok += 1
                    outcome.append(200)
                else:
                    bad.append(f"#{k}: 200 with wrong numbers")
            elif isinstance(r, Resp) and r.status in (503, 429):
                problem = json_error_problem(r)
                outcome.append(r.status)
                if problem:
                    bad.append(f"#{k}: {problem}")
            else:
                bad.append(f"#{k}: {r!r}"[:200])
        results = None
        R.check(case, "4 concurrent 64k-token JSON requests: each 200 (right numbers) or 503/429 JSON",
                not bad, bad[:3])
        R.check(case, "at least one of them is answered 200", ok >= 1, outcome)
        R.figure(case, f"4 x 64k tokens x dim {D}: {outcome} in {secs:.1f} s; peak RSS {hwm:.1f} MiB; bound "
                       f"{bound:.0f} MiB = table {file_mib:.2f} MiB + --max-inflight-bytes {budget / MiB:.0f} MiB + 150 MiB")
        if not SANITIZED:
            R.check(case, "peak RSS (VmHWM) below table + --max-inflight-bytes + 150 MiB",
                    hwm is not None and hwm < bound, f"{hwm:.1f} MiB vs {bound:.0f} MiB")


def case_port(work):
    case = "port"
    path = os.path.join(work, "port.embt")
    write_model(path, 81)
    with Server(case, path) as s:
        t0 = time.monotonic()
        try:
            r = subprocess.run([CLI, "serve", path, "--port", str(s.port), "--host", HOST], stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, timeout=10)
            secs = time.monotonic() - t0
            R.check(case, "a second serve on the same port exits non-zero within 5 s saying the address is in use",
                    r.returncode > 0 and secs <= 5 and re.search(r"in use|EADDRINUSE", r.stderr, re.I),
                    f"{describe_exit(r.returncode)} after {secs:.2f} s: {r.stderr.strip()[:300]!r}")
            R.figure(case, f"second server: {describe_exit(r.returncode)} after {secs:.2f} s: {r.stderr.strip()[:120]!r}")
        except subprocess.TimeoutExpired:
            R.check(case, "a second serve on the same port exits non-zero within 5 s saying the address is in use",
                    False, "still running after 10 s (killed)")
        r = infer(s.port, [[5, 6]])
        R.check(case, "the first server keeps serving", matches(r.body, 81, [[5, 6]]), r)


def case_protocol(work):
    case = "protocol"
    path = os.path.join(work, "proto.embt")
    write_model(path, 91)
    with Server(case, path) as s:
        # server metadata, versions
        r = s.get("/v2")
        try:
            doc = r.json()
            ok = r.status == 200 and doc.get("name") == "embedrt" and isinstance(doc.get("version"), str) and \
                isinstance(doc.get("extensions"), list)
        except Exception:
            ok = False
        R.check(case, "GET /v2: name embedrt, version, extensions list", ok, r)
        for p in ("/v2/models/model", "/v2/models/model/versions/1"):
            r = s.get(p)
            R.check(case, f"GET {p}: 200 metadata", r.status == 200 and r.json().get("name") == "model", r)
        for p in ("/v2/models/model/ready", "/v2/models/model/versions/1/ready", "/v2/health/ready"):
            r = s.get(p)
            R.check(case, f"GET {p}: 200 ready true", r.status == 200 and r.json().get("ready") is True, r)
        r = call(s.port, "POST", "/v2/models/model/versions/1/infer", infer_body([[7, 8]]))
        R.check(case, "POST .../versions/1/infer", matches(r.body, 91, [[7, 8]]), r)
        for p in ("/v2/models/model/versions/2", "/v2/models/model/versions/2/ready"):
            r = s.get(p)
            R.check(case, f"GET {p}: 404 JSON error", json_error_problem(r, {404}) is None, json_error_problem(r, {404}))
        r = call(s.port, "POST", "/v2/models/model/versions/0/infer", infer_body([[7, 8]]))
        R.check(case, "POST .../versions/0/infer: 404 JSON error", json_error_problem(r, {404}) is None,
                json_error_problem(r, {404}))
        for method, p in (("GET", "/nope"), ("GET", "/v2/models/model/infer"), ("DELETE", "/v2/models/model")):
            r = call(s.port, method, p)
            R.check(case, f"{method} {p}: 4xx JSON error", 400 <= r.status < 500 and json_error_problem(r) is None,
                    json_error_problem(r) or r)
        r = s.get("/v2/models/%FF%FE/ready")
        R.check(case, "GET /v2/models/%FF%FE/ready: 404 with valid UTF-8 JSON", json_error_problem(r, {404}) is None,
                json_error_problem(r, {404}))
        r = call(s.port, "POST", "/v2/models/%FF%FE/infer", infer_body([[1]]))
        R.check(case, "POST /v2/models/%FF%FE/infer: 404 with valid UTF-8 JSON", json_error_problem(r, {404}) is None,
                json_error_problem(r, {404}))

        # pipelining: three requests in one send, answered in order
        c = RawConn(s.port)
        try:
            c.send(request_bytes("GET", "/v2/health/live") +
                   request_bytes("POST", "/v2/models/model/infer", infer_body([[1, 2]], "p2")) +
                   request_bytes("GET", "/v2/models/model/ready", keep_alive=False))
            rs = []
            try:
                for _ in range(3):
                    rs.append(c.read_response(timeout=5))
            except Exception as e:
                rs.append(e)
            ok = len(rs) == 3 and all(isinstance(x, Resp) for x in rs) and rs[0].json() == {"live": True} and \
                rs[1].json().get("id") == "p2" and matches(rs[1].body, 91, [[1, 2]]) and rs[2].json() == {"ready": True}
            R.check(case, "pipelined GET + POST + GET in one send: 3 answers, in order", ok, rs)
        finally:
            c.close()
        c = RawConn(s.port)
        try:
            batch = [[[k, k + 1, k + 2]] for k in (10, 20, 30)]
            c.send(b"".join(request_bytes("POST", "/v2/models/model/infer", infer_body(b, f"q{i}"))
                            for i, b in enumerate(batch)))
            rs = []
            try:
                for _ in range(3):
                    rs.append(c.read_response(timeout=5))
            except Exception as e:
                rs.append(e)
            ok = len(rs) == 3 and all(isinstance(x, Resp) and x.json().get("id") == f"q{i}" and
                                      matches(x.body, 91, batch[i]) for i, x in enumerate(rs))
            R.check(case, "three pipelined infers: answered in order, each with its own numbers", ok, rs)
        finally:
            c.close()

        # POST load without Content-Length and without body
        c = RawConn(s.port)
        try:
            c.send(b"POST /v2/repository/models/model/load HTTP/1.1\r\nHost: x\r\n\r\n")
            try:
                r = c.read_response(timeout=10)
            except Exception as e:
                r = e
            R.check(case, "POST .../load without Content-Length or body -> 200", isinstance(r, Resp) and r.status == 200, r)
            ok = c.send(request_bytes("GET", "/v2/health/live"))
            try:
                r2 = c.read_response(timeout=5) if ok else None
            except Exception as e:
                r2 = e
            R.check(case, "... and the connection then serves the next request", isinstance(r2, Resp) and r2.status == 200, r2)
        finally:
            c.close()

        # duplicate Content-Length
        body = infer_body([[1, 2]])
        for values in ((len(body), len(body)), (len(body), 5)):
            c = RawConn(s.port)
            try:
                c.send(f"POST /v2/models/model/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       f"Content-Length: {values[0]}\r\nContent-Length: {values[1]}\r\n\r\n".encode() + body)
                try:
                    r = c.read_response(timeout=5)
                except Exception as e:
                    r = e
                problem = json_error_problem(r, {400}) if isinstance(r, Resp) else repr(r)
                R.check(case, f"duplicate Content-Length {values} -> 400 JSON error", problem is None, problem)
            finally:
                c.close()

        # non-finite JSON literals
        for lit in ("NaN", "Infinity", "-Infinity", "nan", "1e999"):
            raw = ('{"inputs":[{"name":"input_ids","shape":[1,2],"datatype":"INT64","data":[1,%s]}]}' % lit).encode()
            r = call(s.port, "POST", "/v2/models/model/infer", raw)
            problem = json_error_problem(r, {400})
            R.check(case, f"{lit} in data -> 400 JSON error", problem is None, problem)
        raw = b'{"inputs":[{"name":"input_ids","shape":[1,NaN],"datatype":"INT64","data":[1]}]}'
        r = call(s.port, "POST", "/v2/models/model/infer", raw)
        R.check(case, "NaN in shape -> 400 JSON error", json_error_problem(r, {400}) is None, json_error_problem(r, {400}))
        # absurd shapes
        for shape, data in (([4294967296, 4294967296], [1]), ([1, -2], [1, 2]), ([1 << 62, 4], [1])):
            raw = json.dumps({"inputs": [{"name": "input_ids", "shape": shape, "datatype": "INT64", "data": data}]})
            r = call(s.port, "POST", "/v2/models/model/infer", raw.encode())
            problem = json_error_problem(r, {400})
            R.check(case, f"shape {shape} -> 400 JSON error", problem is None, problem)

        # binary tensor extension: lying lengths
        ids = np.asarray([[1, 2, 3]], dtype="<i8")
        def binary(size_claim, header_len_claim=None, payload=None):
            header = json.dumps({"inputs": [{"name": "input_ids", "shape": [1, 3], "datatype": "INT64",
                                             "parameters": {"binary_data_size": size_claim}}]}).encode()
            body = header + (ids.tobytes() if payload is None else payload)
            hl = str(len(header)) if header_len_claim is None else header_len_claim
            return call(s.port, "POST", "/v2/models/model/infer", body,
                        {"Inference-Header-Content-Length": hl, "Content-Type": "application/octet-stream"})
        r = binary(24)
        R.check(case, "binary tensor request (honest lengths) -> 200 with the right numbers",
                matches(r.body, 91, [[1, 2, 3]]), r)
        for label, args in (("Inference-Header-Content-Length past the body", (24, "99999")),
                            ("Inference-Header-Content-Length negative", (24, "-5")),
                            ("Inference-Header-Content-Length not a number", (24, "12abc")),
                            ("binary_data_size larger than the bytes sent", (48, None)),
                            ("binary_data_size 2^62", (1 << 62, None)),
                            ("binary_data_size shorter than shape x 8", (16, None, ids.tobytes()[:16]))):
            r = binary(*args)
            problem = json_error_problem(r, {400})
            R.check(case, f"binary: {label} -> 400 JSON error", problem is None, problem)

        # a chunked request body (HTTP/1.1 clients may send one): decoded, or refused, never a hang
        body = infer_body([[4, 5]])
        c = RawConn(s.port)
        try:
            half = len(body) // 2
            c.send(b"POST /v2/models/model/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n" +
                   b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (half, body[:half], len(body) - half, body[half:]))
            try:
                r = c.read_response(timeout=5)
            except Exception as e:
                r = e
        finally:
            c.close()
        ok = isinstance(r, Resp) and (matches(r.body, 91, [[4, 5]]) or json_error_problem(r, {400, 411, 501}) is None)
        R.check(case, "chunked request body -> 200 with the right numbers (or a 400/411/501 JSON refusal)", ok, r)
        # Content-Length and Transfer-Encoding together (a smuggling vector): refused with 400,
        # or the chunked framing wins; the bytes after the chunked body must not become a request.
        c = RawConn(s.port)
        try:
            smuggled = request_bytes("GET", "/v2/models/model/versions/7")
            c.send(b"POST /v2/models/model/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % (len(body) + 5 + len(smuggled)) +
                   b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) + smuggled)
            rs = []
            try:
                rs.append(c.read_response(timeout=5))
                rs.append(c.read_response(timeout=2))
            except Exception as e:
                rs.append(e)
        finally:
            c.close()
        first = rs[0] if rs and isinstance(rs[0], Resp) else None
        ok = first is not None and (json_error_problem(first, {400}) is None or matches(first.body, 91, [[4, 5]]))
        R.check(case, "Content-Length + Transfer-Encoding: chunked -> 400 JSON error (or chunked wins)", ok, rs)

        r = infer(s.port, [[3]])
        R.check(case, "a normal request still works afterwards", matches(r.body, 91, [[3]]), r)


PROM_LINE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*",?)*\})? \S+( \S+)?$')


def case_prometheus(work):
    case = "prometheus"
    path = os.path.join(work, "prom.embt")
    write_model(path, 92)
    name = 'we"ird\\name'
    with Server(case, path, name=name) as s:
        text = s.metrics()
        R.check(case, "/metrics labels escape the quote and the backslash", 'model="we\\"ird\\\\name"' in text,
                "; ".join(l for l in text.splitlines() if "model=" in l)[:300])
        bad = [l for l in text.splitlines() if l and not l.startswith("#") and not PROM_LINE.match(l)]
        R.check(case, "every /metrics sample line parses as Prometheus text", not bad, bad[:3])
        r = s.get("/v2/models/we%22ird%5Cname/ready")
        R.check(case, "the model is reachable by its percent-encoded name", r.status == 200, r)
        r = s.get("/v2/models/we%22ird%5Cname")
        ok = r.status == 200
        try:
            ok = ok and r.json().get("name") == name
        except Exception:
            ok = False
        R.check(case, "model metadata JSON carries the name escaped correctly", ok, r)


def case_sigterm_slowloris(work):
    case = "sigterm-slowloris"
    path = os.path.join(work, "st.embt")
    write_model(path, 93)
    with Server(case, path, "--drain-timeout", "1", expect_exit=True) as s:
        d = Dripper(s.port, 3, 0.3)
        d.start()
        try:
            time.sleep(0.6)
            t0 = time.monotonic()
            s.proc.send_signal(signal.SIGTERM)
            try:
                code = s.proc.wait(timeout=6)
            except subprocess.TimeoutExpired:
                code = None
            secs = time.monotonic() - t0
        finally:
            d.close()
        R.check(case, "SIGTERM with slowloris clients connected: exit 0 within drain-timeout (1) + 2 s",
                code == 0 and secs <= 3.0, f"{describe_exit(code)} after {secs:.2f} s; log: {s.log_tail(300)}")
        R.figure(case, f"SIGTERM with 3 slowloris connections: {describe_exit(code)} after {secs:.2f} s")


def case_sigterm_inflight(work):
    case = "sigterm-inflight"
    V, D = 1000, 64
    path = os.path.join(work, "si.embt")
    write_model(path, 94, V, D)
    ids = (np.arange(65536) * 3 % V).reshape(16, 4096)
    with Server(case, path, "--drain-timeout", "10", expect_exit=True) as s:
        c = RawConn(s.port, timeout=30)
        try:
            c.send(request_bytes("POST", "/v2/models/model/infer", infer_body(ids), {"Content-Type": "application/json"}))
            time.sleep(0.1)
            t0 = time.monotonic()
            s.proc.send_signal(signal.SIGTERM)
            try:
                r = c.read_response(timeout=20)
            except Exception as e:
                r = e
        finally:
            c.close()
        try:
            code = s.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            code = None
        secs = time.monotonic() - t0
        ok = isinstance(r, Resp) and r.status == 200 and np.array_equal(embeddings_of(r.body), expected(94, ids, V, D))
        R.check(case, "SIGTERM while a 64k-token request is processed: it completes 200 with the right numbers", ok,
                r if not isinstance(r, Resp) else f"{r.status} {len(r.body)} bytes")
        R.check(case, "... and the server then exits 0 (within drain-timeout + 2 s)", code == 0 and secs <= 12,
                f"{describe_exit(code)} after {secs:.2f} s; log: {s.log_tail(300)}")


def case_headers(work):
    case = "headers"
    path = os.path.join(work, "hd.embt")
    write_model(path, 95)
    with Server(case, path) as s:
        variants = {
            "100 KiB of headers (1000 lines)": b"".join(b"X-Pad-%d: %s\r\n" % (i, b"a" * 90) for i in range(1000)),
            "one 100 KiB header line": b"X-Big: " + b"b" * 102400 + b"\r\n",
        }
        for label, pad in variants.items():
            r, secs, note = None, 0, ""
            c = RawConn(s.port)
            try:
                head = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n" + pad + b"\r\n"
                sender = threading.Thread(target=c.send, args=(head,), daemon=True)
                sender.start()
                try:
                    r = c.read_response(timeout=5)
                except Exception as e:
                    note = repr(e)
                closed, secs, extra = c.wait_closed(3) if r is not None else (c.eof, 0, b"")
                sender.join(timeout=5)
            finally:
                c.close()
            R.check(case, f"{label} -> 431 (or 400) and the connection closed",
                    r is not None and r.status in (431, 400) and closed,
                    f"{r} closed={closed} {note}")
            if r is not None and r.status in (431, 400):
                R.check(case, f"{label}: the error body is JSON", json_error_problem(r) is None, json_error_problem(r))
        for label, line in (("garbage request line", b"\x00\x01\x02garbage\xff\r\n\r\n"),
                            ("TLS ClientHello", bytes.fromhex("16030100a5010000a10303") + os.urandom(32) + b"\r\n\r\n"),
                            ("no HTTP version", b"GET /v2/health/live\r\n\r\n"),
                            ("HTTP/9.9", b"GET /v2/health/live HTTP/9.9\r\nHost: x\r\n\r\n"),
                            ("space-padded header name", b"GET /v2/health/live HTTP/1.1\r\nHost : x\r\n\r\n")):
            c = RawConn(s.port)
            try:
                c.send(line)
                try:
                    r = c.read_response(timeout=5)
                except Exception as e:
                    r = e
            finally:
                c.close()
            want = {400, 505} if "9.9" in label else {400}
            problem = json_error_problem(r, want) if isinstance(r, Resp) else repr(r)
            R.check(case, f"{label} -> {'/'.join(map(str, sorted(want)))} JSON error", problem is None, problem)
        for label, cl, want in (("Content-Length -1", "-1", {400}),
                                ("Content-Length 2^70", str(1 << 70), {400, 413}),
                                ("Content-Length 1e3", "1e3", {400}),
                                ("Content-Length +5", "+5", {400})):
            c = RawConn(s.port)
            try:
                c.send(f"POST /v2/models/model/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {cl}\r\n\r\n".encode())
                try:
                    r = c.read_response(timeout=3)
                except Exception as e:
                    r = e
            finally:
                c.close()
            problem = json_error_problem(r, want) if isinstance(r, Resp) else repr(r)
            R.check(case, f"{label} -> {'/'.join(map(str, sorted(want)))} JSON error", problem is None, problem)
        # Expect: 100-continue with a body over the limit: refused before the body is sent
        c = RawConn(s.port)
        try:
            c.send(b"POST /v2/models/model/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Expect: 100-continue\r\nContent-Length: 67108864\r\n\r\n")
            try:
                r = c.read_response(timeout=3)
            except Exception as e:
                r = e
        finally:
            c.close()
        problem = json_error_problem(r, {413}) if isinstance(r, Resp) else repr(r)
        R.check(case, "Expect: 100-continue with 64 MiB announced -> 413 JSON error before any body byte", problem is None,
                problem)
        r = infer(s.port, [[9]])
        R.check(case, "a normal request still works afterwards", matches(r.body, 95, [[9]]), r)


CASES = [
    ("overwrite", case_overwrite),
    ("slowloris", case_slowloris),
    ("header-timeout", case_header_timeout),
    ("request-timeout", case_request_timeout),
    ("idle-timeout", case_idle_timeout),
    ("max-connections", case_max_connections),
    ("memory-body-limit", case_memory_body_limit),
    ("memory-nesting", case_memory_nesting),
    ("memory-inflight", case_memory_inflight),
    ("port", case_port),
    ("protocol", case_protocol),
    ("prometheus", case_prometheus),
    ("sigterm-slowloris", case_sigterm_slowloris),
    ("sigterm-inflight", case_sigterm_inflight),
    ("headers", case_headers),
]


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft != resource.RLIM_INFINITY and soft < 1200:
        print(f"note: RLIMIT_NOFILE is {soft}; the slowloris case needs ~1100 descriptors", flush=True)
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="embedrt-hostile-") as work:
        for name, fn in CASES:
            if SELECTED and not any(word in name for word in SELECTED):
                continue
            t0 = time.monotonic()
            CURRENT[0] = name
            print(f"--- {name}", flush=True)
            try:
                fn(work)
            except Exception as e:
                R.check(name, "case ran to the end", False, f"{e!r} at {traceback.format_exc().strip().splitlines()[-3:]}")
            leaks = LEAKS.get(name, [])
            R.check(name, "no error body leaks internal exception text (json.exception, std::, boost::, what())",
                    not leaks, f"{len(leaks)} error bodies, e.g. {leaks[:2]}")
            R.figure(name, f"case took {time.monotonic() - t0:.1f} s")
    R.figure("all", f"suite took {time.monotonic() - t_start:.1f} s")
    failed = R.summary()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
