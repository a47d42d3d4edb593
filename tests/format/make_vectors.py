"""Writes the .embt conformance vectors (tests/format/vectors/) and their manifest vectors.json.

Every file comes from tools/python/embt_writer.py, a writer built from docs/FORMAT.md alone,
never from the C++ code (a few refusals are a valid file with one field edited afterwards and the
header checksum recomputed, as FORMAT.md 3 defines it). Every expected row is computed here with
numpy from FORMAT.md section 7 (float32 arithmetic in the document's order), and every expected
metadata value from the defaults of FORMAT.md section 5. A third party can implement the format
from FORMAT.md and check itself against these files and vectors.json.

Manifest entries:
  valid true:  "format", "metadata" (every key as a reader sees it: defaults filled in, unknown keys
               kept), "tables" (name, role, dtype as the tools spell it, shape) and "runs" (ids,
               start, segments, expected float32 rows as little-endian hex; "tolerance" says
               bit-exact, or 1e-5 relative where LayerNorm is involved).
  valid false: "refused_by" is "open" (any reader refuses the file: sections 2-6), "verify" (the
               file opens; reading every table finds the fault) or "embed" (a well-formed file
               that section 7's computation refuses); "error_contains" names the field.

usage: /usr/bin/python3 tests/format/make_vectors.py     (deterministic; rewrites the folder)
"""
import json
import os
import shutil
import struct
import sys
import tempfile

import numpy as np
import xxhash

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "python"))
from embt_writer import bf16_bits, lowest_version, write_embt  # noqa: E402

OUT = os.path.join(HERE, "vectors")
rng = np.random.default_rng(2026)
f32 = np.float32
manifest = []

# FORMAT.md 5: the keys every reader knows, with their defaults (position.padding_id: absent).
DEFAULTS = {"model.family": "custom", "source.files": "", "source.dtype": "", "context_length": 0,
            "position.offset": 0, "position.kind": "none", "token.scale": 1.0, "output.scale": 1.0,
            "norm.epsilon": 1e-5}
DTYPE_NAMES = {"f32": "f32", "f16": "f16", "bf16": "bf16", "int8": "int8", "int32": "int32", "int4": "int4"}  # as the tools spell them
ROLE_NAMES = {0: "other", 1: "token", 2: "position", 3: "segment", 4: "norm_weight", 5: "norm_bias"}


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
    if dtype == "int32":
        return np.asarray(array, dtype=np.int64)  # entries (an id map), not values
    if dtype == "int4":
        codes, scale, bias = array
        return codes.astype(f32) * np.asarray(scale, dtype=np.float16).astype(f32).reshape(-1, 1) + \
            np.asarray(bias, dtype=np.float16).astype(f32).reshape(-1, 1)
    codes, scale, bias = array
    return codes.astype(f32) * scale.reshape(-1, 1).astype(f32) + bias.reshape(-1, 1).astype(f32)


OUTPUT_TABLES = ("token", "position", "segment", "norm_weight", "norm_bias")
OUTPUT_RULES = ("context_length", "position.offset", "position.padding_id", "token.scale", "output.scale",
                "norm.epsilon", "shape", "ids.out_of_range", "pooling.mode", "pooling.normalize", "pooling.weights",
                "ids.map")


def output_view(tables_by_name, roles, meta, output=None):
    """FORMAT.md 5 and 7 (1.2): the tables (by role) and rules (as the primary output's keys) of an
    output: the primary one (None) from roles and the first key table, output N from outputs.N.*."""
    if output is None:
        tables = dict(roles)
        if "ids.map" in meta:
            tables["ids.map"] = tables_by_name[meta["ids.map"]]
        return tables, meta
    prefix = f"outputs.{output}."
    tables = {role: tables_by_name[meta[prefix + role]] for role in OUTPUT_TABLES + ("ids.map",) if prefix + role in meta}
    rules = {rule: meta[prefix + rule] for rule in OUTPUT_RULES if prefix + rule in meta}
    if "shape" in rules:
        rules["output.shape"] = rules.pop("shape")
    return tables, rules


def section7(tables, meta, ids, start, segments=None):
    """FORMAT.md section 7, in float32, token by token."""
    tok = tables["token"]
    id_map = tables["ids.map"][0] if "ids.map" in tables else None  # 2.0: id -> token row
    vocab = len(id_map) if id_map is not None else len(tok)
    row0 = meta.get("ids.out_of_range", "refuse") == "row0"
    offset = meta.get("position.offset", 0)
    pad = meta.get("position.padding_id", -1)
    token_scale = f32(meta.get("token.scale", 1.0))
    output_scale = f32(meta.get("output.scale", 1.0))
    rows, nonpad = [], 0
    for t, i in enumerate(ids):
        e = i if 0 <= i < vocab or not row0 else 0
        x = tok[id_map[e] if id_map is not None else e].copy()
        if token_scale != 1:
            x = x * token_scale
        if "segment" in tables:
            x = x + tables["segment"][segments[t] if segments else 0]
        if "position" in tables:
            if pad >= 0:
                row = offset - 1 if i == pad else offset + start + nonpad
                nonpad += i != pad
            else:
                row = start + t + offset
            x = x + tables["position"][row]
        if output_scale != 1:
            x = x * output_scale
        if "norm_weight" in tables:
            d = x.astype(np.float64)
            mean = d.mean()
            var = ((d - mean) ** 2).mean()
            y = (d - mean) / np.sqrt(var + meta.get("norm.epsilon", 1e-5)) * tables["norm_weight"][0]
            y = y + (tables["norm_bias"][0] if "norm_bias" in tables else 0)
            x = y.astype(f32)
        assert x.dtype == f32
        rows.append(x)
    return np.stack(rows)


def plain(value):
    """A metadata value as a JSON reader shows it."""
    return value[1] if isinstance(value, tuple) else value


def expected_metadata(meta):
    """Every key a reader shows as metadata: defaults filled in, unknown keys kept; the rules of the
    outputs after the primary one (outputs.N.*) are shown per output instead (expected_outputs)."""
    out = dict(DEFAULTS)
    out.update({key: plain(value) for key, value in meta.items() if not is_output_rule(key)})
    return out


def is_output_rule(key):
    return key.startswith("outputs.") and key.count(".") >= 2 and key.split(".", 2)[2] in OUTPUT_TABLES + OUTPUT_RULES


def expected_outputs(meta):
    """The outputs a reader lists: the primary one, then each N of outputs.N.* with its rules."""
    outputs = [{"name": plain(meta.get("output.name", "embeddings")), "primary": True}]
    for key, value in meta.items():
        if not is_output_rule(key):
            continue
        name, rule = key.split(".", 2)[1:]
        entry = next((o for o in outputs if o["name"] == name and not o["primary"]), None)
        if entry is None:
            entry = {"name": name, "primary": False}
            outputs.append(entry)
        entry[rule] = plain(value)
    return outputs


def valid(name, described, specs, meta, queries, norm=False, version=None, **options):
    """specs: [(table name, role, dtype, array[, options])]; queries: [(ids, start, segments[, output])]."""
    path = os.path.join(OUT, name + ".embt")
    write_embt(path, specs, meta, version=version, **options)
    by_role = {role: decode(dtype, array) for tname, role, dtype, array, *_ in specs if role in ROLE_NAMES.values()
               and role != "other"}
    by_name = {tname: decode(dtype, array) for tname, role, dtype, array, *_ in specs}
    plain_meta = {k: plain(v) for k, v in meta.items()}
    runs = []
    for ids, start, segments, *output in queries:
        tables, rules = output_view(by_name, by_role, plain_meta, output[0] if output else None)
        want = section7(tables, rules, ids, start, segments)
        run = {"ids": ids, "start": start, "segments": segments, "expected_f32_hex": want.astype(f32).tobytes().hex()}
        if output:
            run["output"] = output[0]
        runs.append(run)
    tables = []
    for spec in specs:
        tname, role, dtype, array = spec[:4]
        shape = list(array[0].shape if dtype in ("int8", "int4") else array.shape)
        tables.append({"name": tname, "role": role if isinstance(role, str) else ROLE_NAMES.get(role, "other"),
                       "dtype": DTYPE_NAMES[dtype], "shape": shape})
    if version is None:
        version = lowest_version(meta, [spec[2] for spec in specs])
    manifest.append({"file": name + ".embt", "valid": True, "describes": described,
                     "format": f"{version[0]}.{version[1]}", "metadata": expected_metadata(meta),
                     "outputs": expected_outputs(meta), "tables": tables,
                     "tolerance": "1e-5 relative (LayerNorm)" if norm else "bit-exact", "runs": runs})


def invalid(name, described, raw, error, step="open"):
    with open(os.path.join(OUT, name + ".embt"), "wb") as f:
        f.write(raw)
    manifest.append({"file": name + ".embt", "valid": False, "describes": described, "refused_by": step,
                     "error_contains": error})


def written(specs, meta, **options):
    """The bytes embt_writer.py writes (for the refusals made by editing a valid file)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "x.embt")
        write_embt(path, specs, meta, **options)
        return bytearray(open(path, "rb").read())


def invalid_written(name, described, specs, meta, error, step="open", **options):
    invalid(name, described, bytes(written(specs, meta, **options)), error, step)


def reseal(raw):
    """Recomputes the header checksum (FORMAT.md 3) after an edit of the front matter."""
    meta_offset, meta_size = struct.unpack_from("<QQ", raw, 40)
    front_end = meta_offset + meta_size
    struct.pack_into("<Q", raw, 120, xxhash.xxh3_64_intdigest(bytes(raw[:120]) + bytes(raw[128:front_end])))
    return bytes(raw)


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    tok, pos = table(11, 5), table(9, 5)

    # ---- valid files: sections 2-7 ----
    learned = {"model.family": "gpt2", "position.kind": "learned", "context_length": 9}
    valid("f32_learned", "f32 token + learned position tables (GPT-2's computation), format 1.0",
          [("tok", "token", "f32", tok), ("pos", "position", "f32", pos)], learned,
          [([3, 0, 10, 7], 0, None), ([1, 2], 7, None)])
    valid("f16_offset_scale",
          "f16 token and position tables (decoded exactly to f32, then added), position.offset 2 (OPT: row "
          "start + t + 2), position.kind sinusoidal (a stored table like any other), output.scale 0.75 after the sum",
          [("wte", "token", "f16", tok), ("wpe", "position", "f16", pos)],
          {"model.family": "opt", "position.kind": "sinusoidal", "position.offset": 2, "context_length": 7,
           "output.scale": 0.75, "source.dtype": "float16", "source.files": "a.safetensors\nb.safetensors"},
          [([3, 0, 10, 7], 2, None), ([9], 6, None)])
    valid("bf16_token", "a bf16 token table alone (upper 16 bits of binary32, rounded to nearest even)",
          [("tok", "token", "bf16", tok)], {"model.family": "transformer"}, [([10, 0, 3], 0, None)])
    codes = rng.integers(-128, 128, size=(11, 7)).astype(np.int8)
    codes[0, :2] = (-128, 127)
    scale, bias = (rng.random(11) * 0.1).astype(f32), rng.standard_normal(11).astype(f32)
    valid("int8_rowwise", "int8_rowwise token table, dim 7 (codes padded to 8 bytes, then f32 scale and bias); "
          "no metadata at all: every key takes its default",
          [("tok", "token", "int8", (codes, scale, bias))], {}, [([0, 10, 5, 5], 0, None)])
    bert = {"model.family": "bert", "position.kind": "learned", "context_length": 9, "norm.epsilon": 1e-12,
            "config.pad_token_id": 0, "config.layer_norm_eps": 1e-12, "config.model_type": "bert"}
    valid("bert_layernorm", "token + segment (token types) + position, then LayerNorm with f32 weight and bias; "
          "provenance keys (config.*) kept with their types",
          [("tok", "token", "f32", tok), ("seg", "segment", "f32", table(2, 5)), ("pos", "position", "f32", pos),
           ("w", "norm_weight", "f32", table(1, 5)), ("b", "norm_bias", "f32", table(1, 5))],
          bert, [([3, 1, 4, 1], 0, [0, 1, 1, 0]), ([2, 2], 5, None)], norm=True)
    valid("norm_weight_only", "LayerNorm with a norm_weight table and no norm_bias (bias 0), norm.epsilon 1e-3",
          [("tok", "token", "f32", tok), ("gamma", "norm_weight", "f32", table(1, 5))],
          {"norm.epsilon": 1e-3}, [([4, 0, 4], 0, None)], norm=True)
    valid("v1_1_padding_scale", "format 1.1: token.scale before the additions and padding-aware positions "
          "(position.padding_id 1, position.offset 2: pads take row 1, others 2 + start + non-pads before)",
          [("tok", "token", "f32", tok), ("pos", "position", "f32", pos)],
          {"model.family": "roberta", "position.kind": "learned", "position.offset": 2, "context_length": 7,
           "token.scale": 2.5, "position.padding_id": 1}, [([4, 1, 5, 6, 1, 1], 0, None), ([1, 9, 8], 3, None)])
    valid("newer_minor_1_7", "a newer minor (1.7): 256-byte header and 192-byte directory entries whose extra "
          "bytes are 0xAB, non-zero reserved header bytes and entry flags, a table with unknown role 9 (read as "
          "other), unknown keys of every type (kept, not used), zero bytes after the last metadata record",
          [("tok", "token", "f32", tok, {"flags": 5}), ("future", 9, "f32", table(3, 5), {"flags": 1})],
          {"vendor.note": "kept, not used", "vendor.count": ("u64", 3), "vendor.delta": ("i64", -7),
           "vendor.ratio": ("f64", 0.1), "vendor.utf8": "h\u00e9llo \u2713"},
          [([2, 8], 0, None)], version=(1, 7), header_size=256, entry_size=192, extension_byte=0xAB,
          reserved=bytes(range(1, 65)), metadata_trailing_zeros=16)

    # ---- 1.2: several outputs, shapes, the row-0 id rule, pooling defaults ----
    # Their own generator, so the vectors made before 1.2 keep their bytes.
    g12 = np.random.default_rng(1202)
    per_layer = g12.standard_normal((6, 6)).astype(f32)
    valid("v1_2_two_outputs", "format 1.2: the primary output named inputs_embeds (token.scale 2, output.shape 5) "
          "and a second output per_layer from table 'pl' (role other, 6 rows of 2 x 3): its own token.scale 0.5, "
          "shape 2,3, ids outside its 6 rows read row 0 (ids.out_of_range row0), its own position table 'pl_pos' "
          "with position.offset 1",
          [("tok", "token", "f32", tok), ("pl", "other", "f32", per_layer), ("pl_pos", "other", "f32", g12.standard_normal((9, 6)).astype(f32))],
          {"model.family": "gemma3n", "output.name": "inputs_embeds", "output.shape": "5", "token.scale": 2.0,
           "outputs.per_layer.token": "pl", "outputs.per_layer.token.scale": 0.5, "outputs.per_layer.shape": "2,3",
           "outputs.per_layer.ids.out_of_range": "row0", "outputs.per_layer.position": "pl_pos",
           "outputs.per_layer.position.offset": 1, "outputs.per_layer.context_length": 8},
          [([3, 0, 10, 7], 0, None), ([3, 0, 10, 7, 5, 6], 2, None, "per_layer")])
    valid("v1_2_pooling_defaults", "format 1.2: pooling defaults of the primary output (mean, normalized, "
          "per-token weights in table 'w' [11, 1] f32); per-token requests are unchanged",
          [("tok", "token", "f16", tok), ("w", "other", "f32", g12.random((1, 11)).astype(f32))],
          {"pooling.mode": "mean", "pooling.normalize": 1, "pooling.weights": "w"}, [([1, 2, 10], 0, None)])

    # ---- 2.0: id maps (int32 tables) ----
    g20 = np.random.default_rng(2000)
    rows4 = g20.standard_normal((4, 5)).astype(f32)
    id_map = np.array([[3, 0, 0, 1, 2, 3, 1, 0, 2]], dtype=np.int32)  # 9 ids onto 4 rows
    valid("v2_0_id_map", "format 2.0: an id map (ids.map, an int32 table [1, 9]) sending 9 ids onto the 4 rows of "
          "the token table, with per-id pooling weights [1, 9] and the row-0 rule (ids past 9 read id 0, row 3)",
          [("rows", "token", "f32", rows4), ("mapping", "other", "int32", id_map),
           ("w", "other", "f32", g20.random((1, 9)).astype(f32))],
          {"model.family": "model2vec", "ids.map": "mapping", "pooling.weights": "w", "pooling.mode": "mean",
           "ids.out_of_range": "row0"}, [([0, 8, 3, 4, 11, -2], 0, None)])

    codes4 = g20.integers(0, 16, size=(11, 9)).astype(np.uint8)
    codes4[0, :2] = (0, 15)
    scale4 = g20.random(11).astype(np.float16) * np.float16(0.1)
    bias4 = g20.standard_normal(11).astype(np.float16)
    valid("v2_0_int4_rowwise", "format 2.0: int4_rowwise token and position tables, dim 9 (5 bytes of codes, two a "
          "byte, low nibble first, padded to 8, then f16 scale and bias); odd starts",
          [("tok", "token", "int4", (codes4, scale4, bias4)),
           ("pos", "position", "int4", (codes4[:9], scale4[:9], bias4[:9]))],
          {"position.kind": "learned", "context_length": 9}, [([10, 0, 3], 1, None), ([5, 5], 6, None)])

    # ---- well-formed files that the computation (section 7) refuses: verify passes, embed fails ----
    invalid_written("id_map_entry_outside", "format 2.0: the id map sends id 0 to row 7 of a 4-row token table "
                    "(found when id 0 is used)", [("rows", "token", "f32", rows4),
                                                 ("mapping", "other", "int32", np.array([[7, 1]], dtype=np.int32))],
                    {"ids.map": "mapping"}, "ids.map table 'mapping' maps id 0 to row 7, outside the token table's 4 rows",
                    step="embed")
    invalid_written("id_map_not_one_row", "format 2.0: an id map of two rows",
                    [("rows", "token", "f32", rows4), ("mapping", "other", "int32", np.zeros((2, 3), dtype=np.int32))],
                    {"ids.map": "mapping"}, "ids.map table 'mapping' must be one int32 row", step="embed")
    invalid_written("token_table_int32", "format 2.0: an int32 token table (int32 holds entries, not values)",
                    [("rows", "token", "int32", np.zeros((4, 5), dtype=np.int32))], {},
                    "token table 'rows' is int32, which holds no embedding values", step="embed")
    invalid_written("no_tables", "a valid file with no table (the footer follows the metadata): opens and "
                    "verifies, but embedding needs a token table", [], {"source.files": "x"},
                    "no table has the role 'token'", step="embed")
    invalid_written("position_kind_absent", "a position table but no position.kind key: the default is none",
                    [("tok", "token", "f32", tok), ("pos", "position", "f32", pos)], {"context_length": 9},
                    "position.kind is 'none' but the file has position table", step="embed")
    invalid_written("norm_weight_f16", "a norm_weight table in f16 (the norm tables must be one f32 row)",
                    [("tok", "token", "f32", tok), ("w", "norm_weight", "f16", table(1, 5))], {},
                    "must be one f32 row", step="embed")
    invalid_written("padding_id_offset_0", "format 1.1 position.padding_id with position.offset 0",
                    [("tok", "token", "f32", tok), ("pos", "position", "f32", pos)],
                    {"position.kind": "learned", "position.padding_id": 1},
                    "position.padding_id 1 needs a position table and a position.offset of at least 1", step="embed")

    invalid_written("output_table_missing", "format 1.2: outputs.x.token names a table the file does not have",
                    [("tok", "token", "f32", tok)], {"outputs.x.token": "nope"},
                    "output 'x': outputs.x.token names table 'nope', which the file does not have", step="embed")
    invalid_written("output_shape_product", "format 1.2: output.shape 2,2 for a token table of dim 5",
                    [("tok", "token", "f32", tok)], {"output.shape": "2,2"},
                    "shape [2,2] does not hold one token's 5 values", step="embed")

    # ---- refusals of sections 2-6, each a valid file with one fault ----
    empty = written([], {"model.family": "custom", "source.files": "model.safetensors", "context_length": 0})
    raw = bytearray(empty)
    struct.pack_into("<H", raw, 8, 3)
    invalid("major_3", "version_major 3 (header checksum recomputed): refused, naming both versions",
            reseal(raw), "version_major is 3 (file version 3.0), this reader implements version 2.")
    raw = bytearray(empty)
    raw[60] ^= 1  # a reserved header byte: ignored, but covered by the checksum
    invalid("header_checksum", "a reserved header byte changed without recomputing the checksum", bytes(raw),
            "header_checksum is")
    raw = bytearray(empty)
    raw[-8:] = b"EMBT-ENX"
    invalid("bad_footer", "the footer is not EMBT-END", bytes(raw), "footer is [")
    invalid("truncated", "the file cut 16 bytes short", bytes(empty[:-16]), "file_size field is")
    invalid_written("metadata_string_not_utf8", "a string metadata value that is not UTF-8", [],
                    {"model.family": b"g\xffpt"}, "key 'model.family': string value is not valid UTF-8")
    invalid_written("metadata_wrong_type", "a known key with another type (context_length as a string)", [],
                    {"context_length": "9"}, "'context_length' has type string, expected u64")
    invalid_written("position_kind_unknown", "position.kind with a value other than learned, sinusoidal, none",
                    [], {"position.kind": "rotary"}, "position.kind is 'rotary'")
    invalid_written("padding_id_negative", "position.padding_id present and negative", [],
                    {"position.padding_id": ("i64", -1)}, "position.padding_id is negative")

    invalid_written("output_without_token", "format 1.2: rules of an output x without outputs.x.token", [],
                    {"outputs.x.shape": "5"}, "output 'x' has rules but no token table")
    invalid_written("out_of_range_unknown", "format 1.2: ids.out_of_range with a value other than refuse or row0",
                    [], {"ids.out_of_range": "clamp"}, "ids.out_of_range is 'clamp'")
    invalid_written("output_name_invalid", "format 1.2: output.name with a character outside [a-z0-9_]", [],
                    {"output.name": "Embeddings"}, "output.name must be 1 to 63 bytes of [a-z0-9_]")
    invalid_written("shape_not_integers", "format 1.2: output.shape that is not positive integers", [],
                    {"output.shape": "3,x"}, "output.shape is '3,x'")

    one = [("tok", "token", "f32", tok)]
    good = written(one, {})
    raw = bytearray(good)
    raw[4096] ^= 0x40  # a bit of row 0's first value
    invalid("table_checksum", "a table byte changed: the file opens, verify finds it", bytes(raw),
            "table 'tok': data checksum", step="verify")
    invalid_written("row_padding_not_zero", "the bytes of each row past row_bytes are 0xFF (checksum matches)",
                    [("tok", "token", "f32", tok, {"row_fill": 0xFF})], {}, "table 'tok': row 0 padding byte", step="verify")
    raw = bytearray(good)
    struct.pack_into("<Q", raw, 128 + 96, 4096 + 64)
    invalid("misaligned_offset", "a table offset not a multiple of 4096", reseal(raw), "offset 4160 is not a multiple of 4096")
    raw = bytearray(good)
    struct.pack_into("<I", raw, 128 + 68, 6)
    invalid("unknown_dtype", "dtype 6 (reserved): refused", reseal(raw), "('tok'): unknown dtype 6")
    raw = bytearray(good)
    struct.pack_into("<I", raw, 128 + 68, 5)
    invalid("int32_in_1x", "dtype 5 (int32, a 2.0 dtype) in a 1.0 file: refused as unknown", reseal(raw),
            "('tok'): unknown dtype 5 (a 2.0 dtype in a 1.x file)")
    invalid_written("name_not_utf8", "a table name that is not UTF-8", [(b"t\xffk", "token", "f32", tok)], {},
                    "name is not valid UTF-8")
    invalid_written("name_after_nul", "a table name with bytes after its NUL terminator",
                    [(b"tok\0x", "token", "f32", tok)], {}, "name has bytes after its NUL terminator")
    raw = written([("tok", "token", "f32", tok), ("pos", "position", "f32", pos)], learned)
    struct.pack_into("<Q", raw, 128 + 128 + 96, 4096)
    invalid("overlapping_tables", "the second table's offset is the first table's", reseal(raw),
            "offset is 4096, expected 8192 (overlaps the previous region)")

    with open(os.path.join(HERE, "vectors.json"), "w") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(manifest)} vectors in {OUT}")


if __name__ == "__main__":
    main()
