"""The .embt conformance vectors (tests/format/vectors.json, made by make_vectors.py from
FORMAT.md alone) through the C++ reader, and the C++ writer's output through the independent
Python reader (tools/python/embt_reader.py).

usage: /usr/bin/python3 test_vectors.py EMBEDRT_CLI
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "python"))
from embt_reader import read_embt  # noqa: E402

CLI = sys.argv[1]
passes, failures = 0, []


def check(name, ok, detail=""):
    global passes
    if ok:
        passes += 1
    else:
        failures.append(name)
        print(f"FAIL {name}: {detail}")


def run(*args):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)


def reader_side():
    for v in json.load(open(os.path.join(HERE, "vectors.json"))):
        path = os.path.join(HERE, "vectors", v["file"])
        name = v["file"]
        if not v["valid"]:
            r = run(v["refused_by"] if v["refused_by"] == "verify" else "inspect", path)
            check(f"{name}: refused ({v['describes']})", r.returncode == 1 and v["error_contains"] in r.stderr,
                  f"exit {r.returncode}: {r.stderr.strip()}")
            continue
        r = run("verify", path)
        check(f"{name}: verifies", r.returncode == 0, r.stderr)
        for i, q in enumerate(v["runs"]):
            args = ["embed", path, "--ids", ",".join(map(str, q["ids"])), "--start", q["start"], "--json",
                    "--out-dtype", "f32"]
            if q["segments"]:
                args += ["--segments", ",".join(map(str, q["segments"]))]
            r = run(*args)
            if r.returncode != 0:
                check(f"{name} run {i}", False, r.stderr)
                continue
            got = np.array(json.loads(r.stdout)["data"], dtype=np.float64).astype(np.float32)
            want = np.frombuffer(bytes.fromhex(q["expected_f32_hex"]), dtype=np.float32)
            if v["tolerance"] == "bit-exact":
                ok = got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32))
            else:
                ok = got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-5)
            check(f"{name} run {i}: {v['tolerance']} ({v['describes']})", ok,
                  f"max diff {np.abs(got - want).max() if got.shape == want.shape else (got.shape, want.shape)}")
        if v["file"] == "newer_minor_larger_header.embt":
            meta = json.loads(run("inspect", path, "--json").stdout)
            check("newer minor: unknown keys kept and shown", meta["metadata"].get("vendor.note") == "kept, not used"
                  and meta["format"] == "1.7", meta)


def writer_side():
    """Files the C++ writer makes (convert of a safetensors file written here byte by byte),
    read back by the Python reader: every rule checked, every value equal."""
    work = tempfile.mkdtemp(prefix="embedrt-format-")
    rng = np.random.default_rng(5)
    tensors = {"transformer.wte.weight": rng.standard_normal((13, 6)).astype(np.float32),
               "transformer.wpe.weight": rng.standard_normal((4, 6)).astype(np.float32)}
    header, blob = {}, b""
    for name, t in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [len(blob), len(blob) + t.nbytes]}
        blob += t.tobytes()
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    source = os.path.join(work, "model.safetensors")
    with open(source, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + blob)
    for dtype in ("f32", "f16", "bf16", "int8"):
        out = os.path.join(work, f"m_{dtype}.embt")
        r = run("convert", source, "-o", out, "--dtype", dtype, "-q")
        if r.returncode != 0:
            check(f"C++ writer {dtype}: convert", False, r.stderr)
            continue
        try:
            version, meta, tables = read_embt(out)
        except ValueError as e:
            check(f"C++ writer {dtype}: Python reader accepts", False, str(e))
            continue
        wte = next(t for t in tables if t["role"] == "token")["values"]
        src = tensors["transformer.wte.weight"]
        if dtype == "f32":
            ok = np.array_equal(wte, src)
        elif dtype == "int8":
            ok = np.abs(wte - src).max() <= (src.max(1) - src.min(1)).max() / 255
        else:
            ok = np.allclose(wte, src, rtol=2 ** -7 if dtype == "bf16" else 2 ** -10)
        check(f"C++ writer {dtype}: read back by the Python reader (format {version[0]}.{version[1]})",
              ok and meta.get("model.family") == "gpt2")


reader_side()
writer_side()
print(f"{passes} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
