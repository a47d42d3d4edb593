"""Writes the .embt conformance vectors (tests/format/vectors/) and their manifest.

Every file comes from tools/python/embt_writer.py, a writer built from docs/FORMAT.md alone,
never from the C++ code, and every expected row is computed here with numpy from FORMAT.md
section 7 (float32 arithmetic in the document's order). A third party can implement the format
from FORMAT.md and check itself against these files and vectors.json.

usage: /usr/bin/python3 tests/format/make_vectors.py     (deterministic; rewrites the folder)
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "python"))
from embt_writer import bf16_bits, write_embt  # noqa: E402

OUT = os.path.join(HERE, "vectors")
rng = np.random.default_rng(2026)
f32 = np.float32
manifest = []


def table(rows, dim):
    return rng.standard_normal((rows, dim)).astype(f32)


def decode(dtype, array):
    """The float32 values a reader must decode (FORMAT.md 4.2)."""
    if dtype == "f32":
        return array.astype(f32)
    if dtype == "f16":
        return array.astype(np.float16).astype(f32)
    if dtype == "bf16":
        return (bf16_bits(array).astype(np.uint32) << 16).view(f32)
    codes, scale, bias = array
    return codes.astype(f32) * scale.reshape(-1, 1).astype(f32) + bias.reshape(-1, 1).astype(f32)


def section7(tables, meta, ids, start, segments=None):
    """FORMAT.md section 7, in float32, token by token."""
    tok = tables["token"]
    offset = meta.get("position.offset", 0)
    pad = meta.get("position.padding_id", -1)
    rows, nonpad = [], 0
    for t, i in enumerate(ids):
        x = tok[i].copy()
        if meta.get("token.scale", 1.0) != 1.0:
            x = x * f32(meta["token.scale"])
        if "segment" in tables:
            x = x + tables["segment"][segments[t] if segments else 0]
        if "position" in tables:
            if pad >= 0:
                row = offset - 1 if i == pad else offset + start + nonpad
                nonpad += i != pad
            else:
                row = start + t + offset
            x = x + tables["position"][row]
        if meta.get("output.scale", 1.0) != 1.0:
            x = x * f32(meta["output.scale"])
        if "norm_weight" in tables:
            d = x.astype(np.float64)
            mean = d.mean()
            var = ((d - mean) ** 2).mean()
            y = (d - mean) / np.sqrt(var + meta.get("norm.epsilon", 1e-5)) * tables["norm_weight"][0]
            y = y + (tables["norm_bias"][0] if "norm_bias" in tables else 0)
            x = y.astype(f32)
        rows.append(x)
    return np.stack(rows)


def valid(name, described, specs, meta, queries, norm=False, **options):
    """specs: [(table name, role, dtype, array)]; queries: [(ids, start, segments)]."""
    path = os.path.join(OUT, name + ".embt")
    write_embt(path, specs, meta, **options)
    decoded = {role: decode(dtype, array) for _, role, dtype, array in specs}
    runs = []
    for ids, start, segments in queries:
        want = section7(decoded, meta, ids, start, segments)
        runs.append({"ids": ids, "start": start, "segments": segments,
                     "expected_f32_hex": want.astype(f32).tobytes().hex()})
    manifest.append({"file": name + ".embt", "valid": True, "describes": described,
                     "tolerance": "1e-5 relative (LayerNorm)" if norm else "bit-exact", "runs": runs})


def invalid(name, described, raw, error, step="open"):
    with open(os.path.join(OUT, name + ".embt"), "wb") as f:
        f.write(raw)
    manifest.append({"file": name + ".embt", "valid": False, "describes": described, "refused_by": step,
                     "error_contains": error})


def base_bytes():
    path = os.path.join(OUT, "f32_learned.embt")
    return bytearray(open(path, "rb").read())


def reseal(raw):
    """Recomputes the header checksum (FORMAT.md 3) after an edit of the front matter."""
    import xxhash
    header_size, count, entry = struct.unpack_from("<I", raw, 12)[0], *struct.unpack_from("<II", raw, 24)
    meta_offset, meta_size = struct.unpack_from("<QQ", raw, 40)
    front_end = meta_offset + meta_size
    struct.pack_into("<Q", raw, 120, xxhash.xxh3_64_intdigest(bytes(raw[:120]) + bytes(raw[128:front_end])))
    return raw


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    tok, pos = table(11, 5), table(9, 5)
    learned = {"model.family": "gpt2", "position.kind": "learned", "context_length": 9}
    valid("f32_learned", "f32 token + learned position tables (GPT-2's computation)",
          [("tok", "token", "f32", tok), ("pos", "position", "f32", pos)], learned,
          [([3, 0, 10, 7], 0, None), ([1, 2], 7, None)])
    for dtype in ("f16", "bf16"):
        valid(f"{dtype}_learned", f"{dtype} token and position tables, decoded exactly to f32 then added",
              [("tok", "token", dtype, tok), ("pos", "position", dtype, pos)], learned, [([3, 0, 10, 7], 2, None)])
    codes = rng.integers(-128, 128, size=(11, 7)).astype(np.int8)
    scale, bias = (rng.random(11) * 0.1).astype(f32), rng.standard_normal(11).astype(f32)
    valid("int8_rowwise", "int8_rowwise token table, dim 7 (codes padded to 8, then scale and bias)",
          [("tok", "token", "int8", (codes, scale, bias))], {}, [([0, 10, 5, 5], 0, None)])
    bert = {"model.family": "bert", "position.kind": "learned", "context_length": 9, "norm.epsilon": 1e-12}
    valid("bert_layernorm", "token + segment + position, then LayerNorm with weight and bias",
          [("tok", "token", "f32", tok), ("seg", "segment", "f32", table(2, 5)), ("pos", "position", "f32", pos),
           ("w", "norm_weight", "f32", table(1, 5)), ("b", "norm_bias", "f32", table(1, 5))],
          bert, [([3, 1, 4, 1], 0, [0, 1, 1, 0])], norm=True)
    valid("opt_offset", "position.offset 2: row start + t + 2",
          [("tok", "token", "f32", tok), ("pos", "position", "f32", pos)],
          {"position.kind": "learned", "position.offset": 2, "context_length": 7}, [([5, 6, 7], 4, None)])
    valid("v1_1_padding_scale", "format 1.1: token.scale before the additions and padding-aware positions",
          [("tok", "token", "f32", tok), ("pos", "position", "f32", pos)],
          {"position.kind": "learned", "position.offset": 2, "context_length": 7, "token.scale": 2.5,
           "position.padding_id": 1}, [([4, 1, 5, 6, 1, 1], 0, None), ([1, 9, 8], 3, None)], version=(1, 1))
    valid("newer_minor_larger_header", "a newer minor (1.7): 256-byte header, 192-byte entries, unknown keys",
          [("tok", "token", "f32", tok)], {"vendor.note": "kept, not used", "vendor.count": 3},
          [([2, 8], 0, None)], version=(1, 7), header_size=256, entry_size=192)

    good = base_bytes()
    raw = bytearray(good)
    struct.pack_into("<H", raw, 8, 2)
    invalid("major_2", "version_major 2", bytes(reseal(raw)), "version_major is 2")
    raw = bytearray(good)
    raw[60] ^= 1  # a reserved header byte: covered by the checksum
    invalid("header_checksum", "a header byte changed without resealing", bytes(raw), "checksum")
    raw = bytearray(good)
    raw[-9] ^= 0xFF  # last byte of the last table's padding region, before the footer
    invalid("table_checksum", "a table byte changed: found by verify", bytes(raw), "checksum", step="verify")
    raw = bytearray(good)
    raw[-8:] = b"EMBT-ENX"
    invalid("bad_footer", "the footer is not EMBT-END", bytes(raw), "footer")
    invalid("truncated", "the file cut 100 bytes short", bytes(good[:-100]), "file_size")
    raw = bytearray(good)
    struct.pack_into("<Q", raw, 128 + 96, 4096 + 64)  # table 0 offset: not a multiple of 4096
    invalid("misaligned_offset", "a table offset not a multiple of 4096", bytes(reseal(raw)), "offset")
    raw = bytearray(good)
    raw[128] = 0xFF  # first byte of table 0's name: invalid UTF-8
    invalid("name_not_utf8", "a table name that is not UTF-8", bytes(reseal(raw)), "UTF-8")
    path = os.path.join(OUT, "bad_metadata_string.embt")
    write_embt(path, [("tok", "token", "f32", tok)], {"model.family": b"g\xffpt"})
    manifest.append({"file": "bad_metadata_string.embt", "valid": False, "refused_by": "open",
                     "describes": "a string metadata value that is not UTF-8", "error_contains": "not valid UTF-8"})
    with open(os.path.join(HERE, "vectors.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(f"{len(manifest)} vectors in {OUT}")


if __name__ == "__main__":
    main()
