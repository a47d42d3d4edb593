"""The .embt conformance vectors (tests/format/vectors.json, made by make_vectors.py from
FORMAT.md alone) through the C++ reader, and the C++ writer's output through the independent
Python reader (tools/python/embt_reader.py).

  valid vectors:      `embedrt verify` exits 0; `embedrt embed --json --out-dtype f32` gives the
                      expected rows (bit-exact, or 1e-5 relative with LayerNorm); `embedrt inspect
                      --json` shows the expected version, metadata (defaults, unknown keys) and tables.
  invalid vectors:    the step named by refused_by exits 1 and its error contains error_contains;
                      for "embed" refusals the file itself verifies.
  both:               the Python reader agrees (accepts the valid files and refuses the open/verify ones).
  C++ writer:         `embedrt convert` of safetensors files written here byte by byte (every table
                      dtype; a RoBERTa folder for a 1.1 file) read back by the Python reader.

usage: /usr/bin/python3 test_vectors.py EMBEDRT_CLI      (last line: "N passed, M failed")
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from tally import Tally  # noqa: E402

sys.dont_write_bytecode = True  # keep tests/format and tools/python free of __pycache__
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "python"))
sys.path.insert(0, HERE)
from embt_reader import outputs_of, read_embt  # noqa: E402
from make_vectors import is_output_rule, section7  # noqa: E402  (FORMAT.md section 7 in numpy; importing writes nothing)

CLI = os.path.abspath(sys.argv[1])


tally = Tally()
check = tally.check


def run(*args):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)


def embed(path, ids, start, segments=None, output=None):
    args = ["embed", path, "--ids", ",".join(map(str, ids)), "--start", start, "--json", "--out-dtype", "f32"]
    if segments:
        args += ["--segments", ",".join(map(str, segments))]
    if output:
        args += ["--output", output]
    return run(*args)


def same_rows(got, want, tolerance):
    if got.shape != want.shape:
        return False, f"shape {got.shape} != {want.shape}"
    if tolerance == "bit-exact":
        bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
        return bad.size == 0, f"{bad.size} values differ, first at {bad[:1]}: {got[bad[:1]]} != {want[bad[:1]]}"
    return np.allclose(got, want, rtol=1e-5, atol=1e-6), f"max abs diff {np.abs(got - want).max()}"


def valid_vector(v, path):
    name = v["file"]
    r = run("verify", path)
    check(f"{name}: verify exits 0", r.returncode == 0, r.stderr)
    for i, q in enumerate(v["runs"]):
        r = embed(path, q["ids"], q["start"], q["segments"], q.get("output"))
        if r.returncode != 0:
            check(f"{name} run {i}", False, r.stderr)
            continue
        doc = json.loads(r.stdout)
        got = np.array(doc["data"], dtype=np.float64).astype(np.float32)
        want = np.frombuffer(bytes.fromhex(q["expected_f32_hex"]), dtype=np.float32)
        ok, detail = same_rows(got, want, v["tolerance"])
        check(f"{name} run {i}: {v['tolerance']}", ok and doc["shape"][1] == len(q["ids"]), detail)
    r = run("inspect", path, "--json")
    if r.returncode != 0:
        check(f"{name}: inspect --json", False, r.stderr)
        return
    doc = json.loads(r.stdout)
    check(f"{name}: inspect shows format {v['format']}", doc["format"] == v["format"], doc["format"])
    check(f"{name}: inspect shows the metadata (defaults filled in, unknown keys kept)",
          doc["metadata"] == v["metadata"], f"{doc['metadata']} != {v['metadata']}")
    check(f"{name}: inspect shows the outputs and their rules", doc["outputs"] == v["outputs"],
          f"{doc['outputs']} != {v['outputs']}")
    tables = [{k: t[k] for k in ("name", "role", "dtype", "shape")} for t in doc["tables"]]
    check(f"{name}: inspect shows the tables", tables == v["tables"], f"{tables} != {v['tables']}")
    # The independent reader agrees on everything it can see.
    try:
        version, meta, py_tables = read_embt(path)
        ok = f"{version[0]}.{version[1]}" == v["format"] and \
            [(t["name"], t["role"], t["dtype"]) for t in py_tables] == \
            [(t["name"], t["role"], t["dtype"]) for t in v["tables"]] and \
            all(v["metadata"][k] == value for k, value in meta.items() if not is_output_rule(k)) and \
            [o["name"] for o in v["outputs"][1:]] == outputs_of(meta)
        check(f"{name}: the Python reader accepts it", ok, (version, meta))
    except ValueError as e:
        check(f"{name}: the Python reader accepts it", False, str(e))


def invalid_vector(v, path):
    name, step = v["file"], v["refused_by"]
    if step == "embed":
        r = run("verify", path)
        check(f"{name}: well-formed, verify exits 0", r.returncode == 0, r.stderr)
        r = embed(path, [0], 0)
    else:
        r = run("verify" if step == "verify" else "inspect", path)
        if step == "verify":
            opened = run("inspect", path)
            check(f"{name}: opens (inspect exits 0)", opened.returncode == 0, opened.stderr)
        try:
            read_embt(path)
            check(f"{name}: the Python reader refuses it", False, "accepted")
        except ValueError:
            check(f"{name}: the Python reader refuses it", True)
    check(f"{name}: refused by {step} ({v['describes']})",
          r.returncode == 3 and v["error_contains"] in r.stderr,
          f"exit {r.returncode}, stderr {r.stderr.strip()!r}, expected {v['error_contains']!r}")


def reader_side():
    vectors = json.load(open(os.path.join(HERE, "vectors.json")))
    files = sorted(os.listdir(os.path.join(HERE, "vectors")))
    check("every file in vectors/ is in vectors.json", files == sorted(v["file"] for v in vectors),
          set(files) ^ {v["file"] for v in vectors})
    for v in vectors:
        path = os.path.join(HERE, "vectors", v["file"])
        (valid_vector if v["valid"] else invalid_vector)(v, path)


def safetensors(path, tensors):
    """A safetensors file written byte by byte: u64 header size, JSON header, raw little-endian data."""
    header, blob = {}, b""
    for name, t in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [len(blob), len(blob) + t.nbytes]}
        blob += t.astype("<f4").tobytes()
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + blob)


def read_back(label, out):
    try:
        return read_embt(out)
    except ValueError as e:
        check(f"C++ writer {label}: the Python reader accepts it", False, str(e))
        return None


def writer_side():
    """Files the C++ writer makes, read back by the Python reader: every rule checked, every value equal."""
    work = tempfile.mkdtemp(prefix="embedrt-format-")
    try:
        rng = np.random.default_rng(5)
        tensors = {"transformer.wte.weight": rng.standard_normal((13, 6)).astype(np.float32),
                   "transformer.wpe.weight": rng.standard_normal((4, 6)).astype(np.float32)}
        source = os.path.join(work, "model.safetensors")
        safetensors(source, tensors)
        for dtype in ("f32", "f16", "bf16", "int8", "int4"):
            out = os.path.join(work, f"m_{dtype}.embt")
            r = run("convert", source, "-o", out, "--dtype", dtype, "-q")
            if r.returncode != 0:
                check(f"C++ writer {dtype}: convert", False, r.stderr)
                continue
            got = read_back(dtype, out)
            if got is None:
                continue
            version, meta, tables = got
            wte = next(t for t in tables if t["role"] == "token")
            src = tensors["transformer.wte.weight"]
            if dtype == "f32":
                ok = np.array_equal(wte["values"], src)
            elif dtype == "int8":
                ok = np.abs(wte["values"] - src).max() <= (src.max(1) - src.min(1)).max() / 255
            elif dtype == "int4":  # half a step of 15, plus the f16 rounding of the scale and bias
                ok = np.abs(wte["values"] - src).max() <= (src.max(1) - src.min(1)).max() / 15 * 0.51 + 1e-2
            else:
                ok = np.allclose(wte["values"], src, rtol=2 ** -8 if dtype == "bf16" else 2 ** -11)
            check(f"C++ writer {dtype}: read back by the Python reader (format {version[0]}.{version[1]})",
                  ok and version == ((2, 0) if dtype == "int4" else (1, 0)) and wte["dtype"] == dtype
                  and meta.get("model.family") == "gpt2"
                  and meta.get("position.kind") == "learned", (version, meta))
            # Section 7 from the Python reader's decoded tables equals the C++ computation.
            decoded = {t["role"]: t["values"] for t in tables if t["role"] != "other"}
            ids, start = [12, 0, 5], 1
            want = section7(decoded, meta, ids, start).astype(np.float32).ravel()
            r = embed(out, ids, start)
            got_rows = np.array(json.loads(r.stdout)["data"], dtype=np.float64).astype(np.float32).ravel() \
                if r.returncode == 0 else np.zeros(0, np.float32)
            ok, detail = same_rows(got_rows, want, "bit-exact")
            check(f"C++ writer {dtype}: section 7 on the Python reader's tables equals embedrt embed", ok, detail)

        # A RoBERTa folder: config.json says pad_token_id 1, so the C++ writer must write format 1.1.
        folder = os.path.join(work, "roberta")
        os.makedirs(folder)
        h = 6
        roberta = {"roberta.embeddings.word_embeddings.weight": rng.standard_normal((20, h)).astype(np.float32),
                   "roberta.embeddings.position_embeddings.weight": rng.standard_normal((10, h)).astype(np.float32),
                   "roberta.embeddings.token_type_embeddings.weight": rng.standard_normal((1, h)).astype(np.float32),
                   "roberta.embeddings.LayerNorm.weight": rng.standard_normal(h).astype(np.float32),
                   "roberta.embeddings.LayerNorm.bias": rng.standard_normal(h).astype(np.float32)}
        safetensors(os.path.join(folder, "model.safetensors"), roberta)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump({"model_type": "roberta", "architectures": ["RobertaModel"], "hidden_size": h,
                       "pad_token_id": 1, "max_position_embeddings": 10, "type_vocab_size": 1,
                       "layer_norm_eps": 1e-5, "vocab_size": 20}, f)
        out = os.path.join(work, "roberta.embt")
        r = run("convert", folder, "-o", out, "-q")
        if r.returncode != 0:
            check("C++ writer roberta (1.1): convert", False, r.stderr)
            return
        got = read_back("roberta (1.1)", out)
        if got is not None:
            version, meta, tables = got
            roles = {t["role"]: t for t in tables}
            ok = version == (1, 1) and meta.get("position.padding_id") == 1 and meta.get("position.offset") == 2 \
                and np.array_equal(roles["token"]["values"],
                                   roberta["roberta.embeddings.word_embeddings.weight"]) \
                and np.array_equal(roles["norm_weight"]["values"][0], roberta["roberta.embeddings.LayerNorm.weight"])
            check("C++ writer roberta: a 1.1 file (position.padding_id) read back by the Python reader", ok,
                  (version, {k: v for k, v in meta.items() if not k.startswith("recipe.")}))
        writer_two_outputs(work, rng)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def writer_two_outputs(work, rng):
    """A Gemma 3n folder (f32 tables): the C++ writer must write format 1.2 with a second output, and
    section 7 on the Python reader's view of that output must equal embedrt embed --output."""
    folder = os.path.join(work, "gemma3n")
    os.makedirs(folder)
    tensors = {"model.embed_tokens.weight": rng.standard_normal((12, 4)).astype(np.float32),
               "model.embed_tokens_per_layer.weight": rng.standard_normal((8, 6)).astype(np.float32)}
    safetensors(os.path.join(folder, "model.safetensors"), tensors)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "gemma3n_text", "vocab_size": 12, "hidden_size": 4, "vocab_size_per_layer_input": 8,
                   "hidden_size_per_layer_input": 3, "num_hidden_layers": 2}, f)
    out = os.path.join(work, "gemma3n.embt")
    r = run("convert", folder, "-o", out, "-q")
    if r.returncode != 0:
        check("C++ writer gemma3n (1.2): convert", False, r.stderr)
        return
    got = read_back("gemma3n (1.2)", out)
    if got is None:
        return
    version, meta, tables = got
    check("C++ writer gemma3n: format 1.2 with outputs inputs_embeds and per_layer_inputs",
          version == (1, 2) and meta.get("output.name") == "inputs_embeds" and outputs_of(meta) == ["per_layer_inputs"]
          and meta.get("outputs.per_layer_inputs.shape") == "2,3"
          and meta.get("outputs.per_layer_inputs.ids.out_of_range") == "row0",
          (version, {k: v for k, v in meta.items() if not k.startswith(("recipe.", "config."))}))
    by_name = {t["name"]: t["values"] for t in tables}
    prefix = "outputs.per_layer_inputs."
    rules = {"token.scale": meta.get(prefix + "token.scale", 1.0), "ids.out_of_range": meta[prefix + "ids.out_of_range"]}
    ids = [0, 7, 8, 11, 3]
    want = section7({"token": by_name[meta[prefix + "token"]]}, rules, ids, 0).astype(np.float32).ravel()
    r = embed(out, ids, 0, output="per_layer_inputs")
    got_rows = np.array(json.loads(r.stdout)["data"], dtype=np.float64).astype(np.float32).ravel() \
        if r.returncode == 0 else np.zeros(0, np.float32)
    ok, detail = same_rows(got_rows, want, "bit-exact")
    check("C++ writer gemma3n: section 7 of output per_layer_inputs on the Python reader's tables equals embedrt "
          "embed --output per_layer_inputs (ids past its 8 rows read row 0)", ok and r.returncode == 0, detail + r.stderr)


reader_side()
writer_side()
tally.finish()
