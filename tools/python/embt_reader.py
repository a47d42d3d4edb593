"""An independent .embt reader, written from docs/FORMAT.md alone (numpy and xxhash only).

It reads what the C++ writer produces, so the writer is checked against the document rather
than against its own reader (tests/format/test_vectors.py). It checks every rule of sections 2-6
(the header checksum, the layout and, since it reads every table, the data checksums and the zero
padding), and raises ValueError naming the rule a file breaks.
"""
import struct

import numpy as np
import xxhash

MAGIC = b"\x89EMB\r\n\x1a\n"
FOOTER = b"EMBT-END"
DTYPES = {1: "f32", 2: "f16", 3: "bf16", 4: "int8", 5: "int32", 6: "int4"}  # 4, 6: *_rowwise (the tools say int8, int4); 5, 6: 2.0
ROLES = {0: "other", 1: "token", 2: "position", 3: "segment", 4: "norm_weight", 5: "norm_bias"}
KNOWN_KEYS = {"model.family": 4, "source.files": 4, "source.dtype": 4, "context_length": 1, "position.offset": 1,
              "position.kind": 4, "token.scale": 3, "output.scale": 3, "norm.epsilon": 3, "position.padding_id": 2,
              # 1.2: the primary output's name, shape, id rule and pooling defaults
              "output.name": 4, "output.shape": 4, "ids.out_of_range": 4, "pooling.mode": 4, "pooling.normalize": 1,
              "pooling.weights": 4, "ids.map": 4}  # ids.map: 2.0
# 1.2: the rules of output N, as keys outputs.N.<rule> (FORMAT.md 5), with their types.
OUTPUT_RULES = {"token": 4, "position": 4, "segment": 4, "norm_weight": 4, "norm_bias": 4, "context_length": 1,
                "position.offset": 1, "position.padding_id": 2, "token.scale": 3, "output.scale": 3,
                "norm.epsilon": 3, "shape": 4, "ids.out_of_range": 4, "pooling.mode": 4, "pooling.normalize": 1,
                "pooling.weights": 4, "ids.map": 4}
NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_")
KEY_CHARS = set(b"abcdefghijklmnopqrstuvwxyz0123456789._")


def _align(x, a):
    return (x + a - 1) // a * a


def _row_bytes(dtype, dim):
    return {"f32": 4 * dim, "f16": 2 * dim, "bf16": 2 * dim, "int8": _align(dim, 4) + 8, "int32": 4 * dim,
            "int4": _align((dim + 1) // 2, 4) + 4}[dtype]


def _need(ok, what):
    if not ok:
        raise ValueError(what)


def _utf8(raw, what):
    try:
        return raw.decode("utf-8")  # Python's codec is strict RFC 3629: no surrogates, no overlong forms
    except UnicodeDecodeError:
        raise ValueError(f"{what} is not valid UTF-8") from None


def _metadata(block):
    """FORMAT.md 5: {key: value}; known keys checked for their type."""
    meta, pos = {}, 0
    while pos < len(block):
        _need(len(block) - pos >= 8, "metadata: trailing bytes shorter than a record header")
        key_size, kind, _reserved, value_size = struct.unpack_from("<HBBI", block, pos)
        if key_size == 0 and kind == 0 and value_size == 0:
            _need(not any(block[pos:]), "metadata: non-zero bytes after a zero record header")
            break
        end = pos + _align(8 + key_size + value_size, 8)
        _need(end <= len(block), "metadata: a record runs past the block")
        key = block[pos + 8:pos + 8 + key_size]
        _need(1 <= key_size <= 255 and set(key) <= KEY_CHARS, "metadata: invalid key")
        key = key.decode("ascii")
        _need(key not in meta, f"metadata: duplicate key '{key}'")
        _need(kind in (1, 2, 3, 4), f"metadata: key '{key}' has unknown type {kind}")
        _need(kind == 4 or value_size == 8, f"metadata: key '{key}' value_size")
        _need(KNOWN_KEYS.get(key, _output_rule_type(key, kind)) == kind, f"metadata: key '{key}' has the wrong type")
        value = block[pos + 8 + key_size:pos + 8 + key_size + value_size]
        meta[key] = {1: lambda v: struct.unpack("<Q", v)[0], 2: lambda v: struct.unpack("<q", v)[0],
                     3: lambda v: struct.unpack("<d", v)[0],
                     4: lambda v: _utf8(v, f"metadata: key '{key}'")}[kind](value)
        pos = end
    # The values of the known keys (FORMAT.md 5).
    _need(meta.get("position.kind", "none") in ("none", "learned", "sinusoidal"), "metadata: position.kind")
    for key in ("token.scale", "output.scale", "norm.epsilon"):
        _need(np.isfinite(meta.get(key, 1.0)), f"metadata: {key} is not finite")
    _need(meta.get("norm.epsilon", 1.0) >= 0, "metadata: norm.epsilon is negative")
    _need(meta.get("position.padding_id", 0) >= 0, "metadata: position.padding_id is negative")
    _check_rules(meta, "", "output.")
    names = {meta.get("output.name", "embeddings")}
    for name in outputs_of(meta):
        _need(0 < len(name) <= 63, f"metadata: output name '{name}' is longer than 63 bytes")
        _need(f"outputs.{name}.token" in meta, f"metadata: output '{name}' has rules but no token table")
        _need(name not in names, f"metadata: output '{name}' is defined twice")
        names.add(name)
        _check_rules(meta, f"outputs.{name}.", f"outputs.{name}.")
    return meta


def _output_rule_type(key, kind):
    """The type outputs.N.<rule> must have, or `kind` itself for a key that is not such a rule."""
    if not key.startswith("outputs.") or key.count(".") < 2:
        return kind
    rule = key.split(".", 2)[2]
    return OUTPUT_RULES.get(rule, kind)


def outputs_of(meta):
    """The names of the outputs after the primary one, in the order their first key appears (1.2)."""
    names = []
    for key in meta:
        if key.startswith("outputs.") and key.count(".") >= 2:
            name, rule = key.split(".", 2)[1:]
            if rule in OUTPUT_RULES and name not in names:
                names.append(name)
    return names


def _check_rules(meta, prefix, shape_prefix):
    """The values of the 1.2 rules of one output (FORMAT.md 5)."""
    def get(rule, default):
        return meta.get(prefix + rule, default)
    if prefix == "":
        name = meta.get("output.name", "embeddings")
        _need(0 < len(name) <= 63 and set(name) <= NAME_CHARS, "metadata: output.name")
    shape = meta.get(shape_prefix + "shape") if prefix else meta.get("output.shape")
    if shape is not None:
        parts = shape.split(",")
        _need(len(parts) <= 8 and all(p.isdigit() and p.isascii() and int(p) > 0 for p in parts),
              f"metadata: {prefix or 'output.'}shape")
    _need(get("ids.out_of_range", "refuse") in ("refuse", "row0"), f"metadata: {prefix}ids.out_of_range")
    _need(get("pooling.mode", "none") in ("none", "sum", "mean", "max"), f"metadata: {prefix}pooling.mode")
    _need(get("pooling.normalize", 0) in (0, 1), f"metadata: {prefix}pooling.normalize")
    for rule in ("token.scale", "output.scale", "norm.epsilon"):
        _need(np.isfinite(get(rule, 1.0)), f"metadata: {prefix}{rule} is not finite")
    _need(get("norm.epsilon", 1.0) >= 0, f"metadata: {prefix}norm.epsilon is negative")
    _need(get("position.padding_id", 0) >= 0, f"metadata: {prefix}position.padding_id is negative")
    for rule in ("token", "position", "segment", "norm_weight", "norm_bias", "pooling.weights", "ids.map"):
        table = get(rule, None) if (prefix or rule in ("pooling.weights", "ids.map")) else None
        _need(table is None or 1 <= len(table.encode()) <= 63, f"metadata: {prefix}{rule} names no table")


def read_embt(path, strict_writer=True):
    """Returns (version, {key: value}, [{name, role, dtype, rows, dim, row_stride, offset, values f32
    [rows, dim]}]); raises ValueError naming the rule a file breaks. strict_writer also checks what
    a writer must write but a reader ignores (the code padding of int8_rowwise rows)."""
    raw = open(path, "rb").read()
    _need(raw[:8] == MAGIC, "magic")
    _need(len(raw) >= 128 + 8, "truncated")
    major, minor, header_size, file_size, count, entry_size, dir_offset, meta_offset, meta_size = \
        struct.unpack_from("<HHIQIIQQQ", raw, 8)
    _need(major in (1, 2), f"version_major is {major} (file version {major}.{minor}), this reader reads 1.x and 2.x")
    _need(file_size == len(raw), "file_size")
    _need(header_size >= 128 and header_size % 8 == 0, "header_size")
    _need(count <= 65536, "table_count")
    _need(entry_size >= 128 and entry_size % 8 == 0 and entry_size <= 1 << 20, "directory_entry_size")
    _need(dir_offset == header_size, "directory_offset")
    _need(meta_offset == dir_offset + count * entry_size, "metadata_offset")
    _need(meta_size % 8 == 0 and meta_size <= 16 << 20, "metadata_size")
    front_end = meta_offset + meta_size
    _need(front_end <= file_size - 8, "front matter runs past the footer")
    checksum = struct.unpack_from("<Q", raw, 120)[0]
    _need(checksum == xxhash.xxh3_64_intdigest(raw[:120] + raw[128:front_end]), "header_checksum")
    _need(raw[-8:] == FOOTER, "footer")
    meta = _metadata(raw[meta_offset:front_end])

    tables, cursor, names, roles = [], front_end, set(), set()
    for i in range(count):
        e = dir_offset + i * entry_size  # the first 128 bytes of each entry; a newer minor may add more
        field = raw[e:e + 64]
        length = field.find(b"\0") if b"\0" in field else 64
        _need(1 <= length <= 63 and not any(field[length:]), f"table {i}: name")
        name = _utf8(field[:length], f"table {i}: name")
        _need(name not in names, f"table {i}: duplicate name")
        names.add(name)
        role_code, code, rows, dim, stride, offset, size, data_checksum = struct.unpack_from("<IIQQQQQQ", raw, e + 64)
        role = ROLES.get(role_code, "other")
        _need(role == "other" or role not in roles, f"table {name}: a second table with role {role}")
        roles.add(role)
        _need(code in DTYPES and (code < 5 or major >= 2), f"table {name}: unknown dtype {code}")
        dtype = DTYPES[code]
        _need(rows >= 1 and 1 <= dim <= 1 << 24, f"table {name}: rows, dim")
        used = _row_bytes(dtype, dim)
        _need(stride % 64 == 0 and stride >= used, f"table {name}: row_stride")
        _need(size == rows * stride, f"table {name}: size")
        _need(offset % 4096 == 0 and offset == _align(cursor, 4096), f"table {name}: offset")
        _need(offset + size <= file_size - 8, f"table {name}: runs past the footer")
        _need(not any(raw[cursor:offset]), f"table {name}: padding before it is not zero")
        data = raw[offset:offset + size]
        _need(xxhash.xxh3_64_intdigest(data) == data_checksum, f"table {name}: data_checksum")
        rowsb = np.frombuffer(data, dtype=np.uint8).reshape(rows, stride)
        _need(not rowsb[:, used:].any(), f"table {name}: row padding is not zero")
        if dtype == "f32":
            values = rowsb[:, :4 * dim].copy().view(np.float32)
        elif dtype == "f16":
            values = rowsb[:, :2 * dim].copy().view(np.float16).astype(np.float32)
        elif dtype == "bf16":
            values = (rowsb[:, :2 * dim].copy().view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif dtype == "int32":
            values = rowsb[:, :4 * dim].copy().view("<i4").astype(np.int64)  # entries, not floats
        elif dtype == "int4":
            tail = _align((dim + 1) // 2, 4)
            packed = rowsb[:, :(dim + 1) // 2]
            codes = np.stack([packed & 15, packed >> 4], axis=2).reshape(rows, -1)[:, :dim].astype(np.float32)
            scale = rowsb[:, tail:tail + 2].copy().view(np.float16).astype(np.float32)
            bias = rowsb[:, tail + 2:tail + 4].copy().view(np.float16).astype(np.float32)
            values = codes * scale + bias
        else:
            tail = _align(dim, 4)
            if strict_writer:  # FORMAT.md 4.2: written as zero, ignored by readers
                _need(not rowsb[:, dim:tail].any(), f"table {name}: int8 code padding is not zero")
            codes = rowsb[:, :dim].copy().view(np.int8).astype(np.float32)
            scale = rowsb[:, tail:tail + 4].copy().view(np.float32)
            bias = rowsb[:, tail + 4:tail + 8].copy().view(np.float32)
            values = codes * scale + bias
        tables.append({"name": name, "role": role, "dtype": dtype, "rows": rows, "dim": dim, "row_stride": stride,
                       "offset": offset, "values": values})
        cursor = offset + size
    _need(cursor == file_size - 8, "coverage: bytes between the last table and the footer")
    return (major, minor), meta, tables
