"""The `embedrt` CLI misused as a careless operator or a hostile file would: every case must end
with the documented exit code and a message naming the offender, never hang, crash or leave a
file behind.

usage: python3 test_cli_hostile.py EMBEDRT_CLI
"""
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from tally import Tally  # noqa: E402

CLI = sys.argv[1]


tally = Tally('ok   ')
check = tally.check


def run(*args, timeout=20):
    try:
        r = subprocess.run([CLI, *args], capture_output=True, timeout=timeout)
        return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired:
        return "timeout", "", ""


def expect(name, result, code, *needles):
    got, out, err = result
    ok = got == code and all(n in err for n in needles)
    check(f"{name}: exit {code}" + (f", names {needles}" if needles else ""), ok, f"exit {got}, stderr {err.strip()[:300]!r}")


def safetensors(path, tensors):
    """tensors: {name: (dtype, shape, raw bytes)} written as a safetensors file."""
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def f32(*values):
    return struct.pack(f"<{len(values)}f", *values)


with tempfile.TemporaryDirectory() as work:
    def path(name):
        return os.path.join(work, name)

    safetensors(path("small.safetensors"), {"weight": ("F32", [4, 3], f32(*range(12)))})
    r = run("convert", path("small.safetensors"), "-o", path("m.embt"), "--token", "weight", "-q")
    check("setup: a small model converts", r[0] == 0, r[2])

    # --- files that are not files ---------------------------------------------------------
    os.mkfifo(path("fifo.embt"))
    for args in (["inspect", path("fifo.embt")], ["verify", path("fifo.embt")], ["embed", path("fifo.embt"), "--ids", "1"],
                 ["bench", path("fifo.embt"), "--seconds", "0.1"], ["convert", path("fifo.embt"), "-o", path("x.embt")],
                 ["serve", path("fifo.embt"), "--port", "1"]):
        expect(f"a FIFO as the model of {args[0]}", run(*args), 2, "fifo.embt", "not a regular file")
    expect("a device as the model", run("inspect", "/dev/zero"), 2, "/dev/zero", "not a regular file")
    before = os.stat("/dev/null")
    expect("convert -o /dev/null --force", run("convert", path("small.safetensors"), "-o", "/dev/null", "--force",
                                              "--token", "weight", "-q"), 2, "/dev/null", "not a regular file")
    after = os.stat("/dev/null")
    check("/dev/null is still the device", after.st_rdev == before.st_rdev and after.st_ino == before.st_ino)
    os.mkdir(path("folder.embt"))
    expect("a folder as the output", run("convert", path("small.safetensors"), "-o", path("folder.embt"), "--force",
                                         "--token", "weight", "-q"), 2, "folder.embt")

    # --- SIGINT in the middle of a conversion ---------------------------------------------
    rows = 200_000
    with open(path("big.safetensors"), "wb") as f:
        text = json.dumps({"weight": {"dtype": "F32", "shape": [rows, 256], "data_offsets": [0, rows * 256 * 4]}}).encode()
        f.write(struct.pack("<Q", len(text)) + text)
        f.truncate(8 + len(text) + rows * 256 * 4)  # zeros, sparse
    os.mkdir(path("out"))
    interrupted = []
    for delay in (0.05, 0.15, 0.3):
        p = subprocess.Popen([CLI, "convert", path("big.safetensors"), "-o", path("out/big.embt"), "--token", "weight",
                              "--dtype", "bf16", "-q", "--force"], stderr=subprocess.PIPE)
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        code = p.wait(timeout=20)
        interrupted.append(code)
        leftovers = [n for n in os.listdir(path("out")) if n != "big.embt"]
        check(f"SIGINT after {delay} s: no temporary file left", not leftovers, leftovers)
    check("SIGINT: the conversion dies of the signal (or had finished)",
          all(c in (-signal.SIGINT, 0) for c in interrupted), interrupted)

    # --- the model truncated while bench and embed read it -----------------------------------
    r = run("convert", path("big.safetensors"), "-o", path("bench.embt"), "--token", "weight", "--dtype", "bf16", "-q")
    check("setup: a 100 MB model converts", r[0] == 0, r[2])
    p = subprocess.Popen([CLI, "bench", path("bench.embt"), "--batch", "64", "--seq", "256", "--seconds", "5"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.0)
    os.truncate(path("bench.embt"), 4096)  # what cp does first
    try:
        out, err = p.communicate(timeout=20)
        code = p.returncode
    except subprocess.TimeoutExpired:
        p.kill()
        code, err = "timeout", b""
    err = err.decode(errors="replace")
    check("bench on a model truncated under it: exit 1 naming the file, no SIGBUS", code == 1 and
          "bench.embt" in err and "truncated or rewritten in place" in err, (code, err[-300:]))

    # --- numeric options out of range -----------------------------------------------------
    model = path("m.embt")
    for args, flag in ((["serve", model, "--threads", "0"], "--threads"), (["serve", model, "--threads", "-1"], "--threads"),
                       (["serve", model, "--threads", "100000"], "--threads"), (["serve", model, "--port", "0"], "--port"),
                       (["serve", model, "--port", "65536"], "--port"),
                       (["serve", model, "--max-batch-tokens", "-1"], "--max-batch-tokens"),
                       (["serve", model, "--max-body-bytes", "0"], "--max-body-bytes"),
                       (["serve", model, "--header-timeout", "-2"], "--header-timeout"),
                       (["bench", model, "--threads", "-1"], "--threads"), (["bench", model, "--batch", "0"], "--batch"),
                       (["bench", model, "--batch", "99999999999"], "--batch"),
                       (["bench", model, "--seconds", "-1"], "--seconds"),
                       (["embed", model, "--ids", "1", "--batch", "-1"], "--batch"),
                       (["embed", model, "--ids", "1", "--start", "-3"], "--start"),
                       (["convert", path("small.safetensors"), "-o", path("c.embt"), "--token", "weight",
                         "--context", "-1"], "--context")):
        expect(" ".join(a if a != model else "MODEL" for a in args), run(*args), 2, flag)
    expect("bench with a shape past its limit", run("bench", model, "--batch", "50000000", "--seq", "2"), 2,
           "past the bench's limit")

    # --- values past the table dtype ------------------------------------------------------
    safetensors(path("big_values.safetensors"), {"weight": ("F32", [2, 2], f32(1, 2, 70000, 4))})
    expect("--dtype f16 on 70000", run("convert", path("big_values.safetensors"), "-o", path("f16.embt"), "--token", "weight",
                                       "--dtype", "f16", "-q"), 2, "'weight' row 1 column 0 holds 70000", "--allow-overflow")
    check("--dtype f16 refused: no file written", not os.path.exists(path("f16.embt")))
    r = run("convert", path("big_values.safetensors"), "-o", path("f16.embt"), "--token", "weight", "--dtype", "f16",
            "--allow-overflow")
    check("--allow-overflow: converts and reports the infinite error", r[0] == 0 and "max abs error inf" in r[1], r)

    # --- hostile names ----------------------------------------------------------------------
    names = {"esc\x1b[31mred\x1b[0m": 0, "c1\u009b2J": 1, "bidi\u202eevil": 2, "long" + "é" * 300: 3}
    safetensors(path("names.safetensors"), {n: ("F32", [2, 2], f32(i, i, i, i)) for n, i in names.items()})
    code, out, err = run("inspect", path("names.safetensors"))
    check("inspect: no raw ESC, CSI or bidi override reaches the terminal", code == 0 and "\x1b" not in out + err and
          "\u009b" not in out + err and "\u202e" not in out + err and "\\x1b[31m" in out and "\\u009b" in out, out[:400])
    code, out, err = run("inspect", "--json", path("names.safetensors"))
    try:
        doc = json.loads(out)
        check("inspect --json: valid JSON carrying the names", code == 0 and
              {t["name"] for t in doc["tensors"]} == set(names), out[:200])
    except ValueError as e:
        check("inspect --json: valid JSON", False, repr(e))
    r = run("convert", path("names.safetensors"), "-o", path("long.embt"), "--token", "long" + "é" * 300, "-q")
    code, out, err = run("inspect", "--json", path("long.embt"))
    try:
        name = json.loads(out)["tables"][0]["name"]
        check("a long name keeps its last 63 bytes, cut at a character boundary", r[0] == 0 and
              ("long" + "é" * 300).endswith(name) and 62 <= len(name.encode()) <= 63, name)
    except (ValueError, KeyError, IndexError) as e:
        check("a long name is stored and read back", False, f"{r} {e!r}")

    # --- sizes whose products overflow -----------------------------------------------------
    text = json.dumps({"a": {"dtype": "F32", "shape": [0, 1 << 62, 4], "data_offsets": [0, 0]}}).encode()
    with open(path("overflow.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
    expect("a safetensors shape whose strides overflow", run("inspect", path("overflow.safetensors")), 3,
           "strides past 2^63 - 1")

    # --- exit codes of the table in README.md -----------------------------------------------
    expect("an unknown flag", run("inspect", model, "--bogus"), 2, "--bogus")
    expect("a missing input file", run("inspect", path("missing.embt")), 3, "missing.embt")
    with open(path("garbage.embt"), "wb") as f:
        f.write(b"\x89EMB\r\n\x1a\n" + b"\xff" * 100)
    expect("a damaged input file", run("verify", path("garbage.embt")), 3, "garbage.embt")
    expect("an existing output without --force", run("convert", path("small.safetensors"), "-o", model, "--token",
                                                      "weight", "-q"), 4, "m.embt", "--force")
    expect("an id past the model", run("embed", model, "--ids", "4"), 2, "id 4 is out of range")

tally.finish()
