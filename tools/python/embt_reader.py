"""An independent .embt reader, written from docs/FORMAT.md alone (numpy and xxhash only).

It reads what the C++ writer produces, so the writer is checked against the document rather
than against its own reader (tests/format/test_vectors.py)."""
import struct

import numpy as np
import xxhash

MAGIC = b"\x89EMB\r\n\x1a\n"
DTYPES = {1: ("f32", 4), 2: ("f16", 2), 3: ("bf16", 2), 4: ("int8", None)}
ROLES = {0: "other", 1: "token", 2: "position", 3: "segment", 4: "norm_weight", 5: "norm_bias"}


def _align(x, a):
    return (x + a - 1) // a * a


def read_embt(path):
    """Returns (version, {key: value}, [{name, role, dtype, rows, dim, values f32 [rows, dim]}]);
    raises ValueError naming the rule a file breaks."""
    raw = open(path, "rb").read()

    def need(ok, what):
        if not ok:
            raise ValueError(what)

    need(raw[:8] == MAGIC, "magic")
    major, minor, header_size, file_size, count, entry_size, dir_offset, meta_offset, meta_size = \
        struct.unpack_from("<HHIQIIQQQ", raw, 8)
    need(major == 1, "version_major")
    need(file_size == len(raw), "file_size")
    need(raw[-8:] == b"EMBT-END", "footer")
    need(dir_offset == header_size and meta_offset == dir_offset + count * entry_size, "directory layout")
    front_end = meta_offset + meta_size
    checksum = struct.unpack_from("<Q", raw, 120)[0]
    need(checksum == xxhash.xxh3_64_intdigest(raw[:120] + raw[128:front_end]), "header_checksum")
    meta, pos = {}, meta_offset
    while pos + 8 <= front_end:
        key_size, kind, _, value_size = struct.unpack_from("<HBBI", raw, pos)
        if key_size == 0:
            break
        key = raw[pos + 8:pos + 8 + key_size].decode("ascii")
        value = raw[pos + 8 + key_size:pos + 8 + key_size + value_size]
        meta[key] = {1: lambda v: struct.unpack("<Q", v)[0], 2: lambda v: struct.unpack("<q", v)[0],
                     3: lambda v: struct.unpack("<d", v)[0], 4: lambda v: v.decode("utf-8")}[kind](value)
        pos += _align(8 + key_size + value_size, 8)
    tables, cursor = [], front_end
    for i in range(count):
        e = dir_offset + i * entry_size
        name = raw[e:e + 64].split(b"\0")[0].decode("utf-8")
        role, code, rows, dim, stride, offset, size, data_checksum = struct.unpack_from("<IIQQQQQQ", raw, e + 64)
        need(offset == _align(cursor, 4096) and size == rows * stride and stride % 64 == 0, f"table {name} layout")
        data = raw[offset:offset + size]
        need(xxhash.xxh3_64_intdigest(data) == data_checksum, f"table {name} checksum")
        rowsb = np.frombuffer(data, dtype=np.uint8).reshape(rows, stride)
        dtype, width = DTYPES[code]
        if dtype == "f32":
            values = rowsb[:, :4 * dim].copy().view(np.float32)
        elif dtype == "f16":
            values = rowsb[:, :2 * dim].copy().view(np.float16).astype(np.float32)
        elif dtype == "bf16":
            values = (rowsb[:, :2 * dim].copy().view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            tail = _align(dim, 4)
            codes = rowsb[:, :dim].copy().view(np.int8).astype(np.float32)
            scale = rowsb[:, tail:tail + 4].copy().view(np.float32)
            bias = rowsb[:, tail + 4:tail + 8].copy().view(np.float32)
            values = codes * scale + bias
        tables.append({"name": name, "role": ROLES.get(role, "other"), "dtype": dtype, "rows": rows, "dim": dim,
                       "values": values})
        cursor = offset + size
    need(cursor + 8 == file_size, "coverage")
    return (major, minor), meta, tables
