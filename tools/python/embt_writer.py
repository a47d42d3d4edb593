"""A second, independent implementation of the .embt writer, written from docs/FORMAT.md alone.

It exists so that the C++ reader is tested against the document rather than against its own
writer, and so that scripts can produce models from PyTorch tensors. Only numpy and xxhash are
needed; torch tensors are accepted through .numpy().
"""
import os
import struct
import tempfile

import numpy as np
import xxhash

MAGIC = b"\x89EMB\r\n\x1a\n"
FOOTER = b"EMBT-END"
ROLES = {"other": 0, "token": 1, "position": 2, "segment": 3, "norm_weight": 4, "norm_bias": 5}
DTYPES = {"f32": 1, "f16": 2, "bf16": 3, "int8": 4, "int32": 5, "int4": 6}  # int32, int4: format 2.0


def bf16_bits(values):
    """float32 -> bfloat16 bits, round to nearest even (FORMAT.md 4.2: the upper 16 bits)."""
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _row_bytes(dtype, array):
    """The payload bytes of each row, [rows, row_bytes(dim)] (FORMAT.md 4.2)."""
    if dtype == "f32":
        return np.ascontiguousarray(array, dtype=np.float32).view(np.uint8).reshape(array.shape[0], -1)
    if dtype == "f16":
        return np.ascontiguousarray(array, dtype=np.float16).view(np.uint8).reshape(array.shape[0], -1)
    if dtype == "bf16":
        return bf16_bits(array).view(np.uint8).reshape(array.shape[0], -1)
    if dtype == "int32":
        return np.ascontiguousarray(array, dtype="<i4").view(np.uint8).reshape(array.shape[0], -1)
    if dtype == "int4":  # codes [rows, dim] 0..15 (two a byte, low nibble first), f16 scale and bias [rows]
        codes, scale, bias = array
        rows, dim = codes.shape
        tail = _align((dim + 1) // 2, 4)
        out = np.zeros((rows, tail + 4), dtype=np.uint8)
        padded = np.zeros((rows, 2 * ((dim + 1) // 2)), dtype=np.uint8)
        padded[:, :dim] = np.asarray(codes, dtype=np.uint8)
        out[:, :(dim + 1) // 2] = padded[:, 0::2] | (padded[:, 1::2] << 4)
        out[:, tail:tail + 2] = np.asarray(scale, dtype=np.float16).reshape(rows, 1).view(np.uint8)
        out[:, tail + 2:tail + 4] = np.asarray(bias, dtype=np.float16).reshape(rows, 1).view(np.uint8)
        return out
    codes, scale, bias = array  # int8 rowwise: codes [rows, dim] int8, scale and bias [rows] f32
    rows, dim = codes.shape
    out = np.zeros((rows, _align(dim, 4) + 8), dtype=np.uint8)
    out[:, :dim] = np.ascontiguousarray(codes, dtype=np.int8).view(np.uint8)
    out[:, _align(dim, 4):_align(dim, 4) + 4] = np.asarray(scale, dtype=np.float32).reshape(rows, 1).view(np.uint8)
    out[:, _align(dim, 4) + 4:] = np.asarray(bias, dtype=np.float32).reshape(rows, 1).view(np.uint8)
    return out


def _align(x, a):
    return (x + a - 1) // a * a


TYPES = {"u64": 1, "i64": 2, "f64": 3, "string": 4}
KEYS_1_1 = ("token.scale", "position.padding_id")  # FORMAT.md 3: a file using one is version 1.1
KEYS_1_2 = ("output.name", "output.shape", "ids.out_of_range", "pooling.mode", "pooling.normalize", "pooling.weights")


def lowest_version(metadata, dtypes=()):
    """FORMAT.md 3 and 8: the lowest version that expresses the metadata and tables of these dtypes."""
    if "int32" in dtypes or "int4" in dtypes or any(key == "ids.map" or key.endswith(".ids.map") for key in metadata):
        return (2, 0)
    if any(key in KEYS_1_2 or key.startswith("outputs.") for key in metadata):
        return (1, 2)
    return (1, 1 if any(key in metadata for key in KEYS_1_1) else 0)


def _metadata_block(metadata, trailing_zeros=0):
    """FORMAT.md 5. A value is a str, bytes (raw string bytes, for testing refusals), a float (f64),
    an int (u64, or i64 when negative or for position.padding_id), or a (type, value) pair that
    names the type: ("i64", 3), ("f64", 2.0), ("u64", 1), ("string", "x" or b"raw").
    trailing_zeros: zero bytes after the last record (a zero record header ends the block)."""
    block = b""
    for key, value in metadata.items():
        if isinstance(value, tuple):
            name, value = value
            kind = TYPES[name]
            payload = {1: lambda v: struct.pack("<Q", v), 2: lambda v: struct.pack("<q", v),
                       3: lambda v: struct.pack("<d", v),
                       4: lambda v: v if isinstance(v, bytes) else v.encode()}[kind](value)
        elif isinstance(value, str):
            kind, payload = 4, value.encode()
        elif isinstance(value, bytes):  # raw string bytes, for testing refusals
            kind, payload = 4, value
        elif isinstance(value, float):
            kind, payload = 3, struct.pack("<d", value)
        elif value < 0 or key == "position.padding_id":
            kind, payload = 2, struct.pack("<q", value)
        else:
            kind, payload = 1, struct.pack("<Q", value)
        record = struct.pack("<HBBI", len(key), kind, 0, len(payload)) + key.encode() + payload
        block += record + b"\0" * (_align(len(record), 8) - len(record))
    assert trailing_zeros % 8 == 0
    return block + b"\0" * trailing_zeros


def write_embt(path, tables, metadata, version=None, header_size=128, entry_size=128, extension_byte=0,
               reserved=b"", metadata_trailing_zeros=0):
    """tables: list of (name, role, dtype, array [rows, dim]) (int8: (codes, scale, bias)), with an
    optional fifth element {"flags": u32, "row_fill": byte}; a role is a name or a number (6 and up
    are reserved for newer minors); metadata: {key: value} (see _metadata_block).
    version: (major, minor); by default the lowest that expresses the file (FORMAT.md 3, 8).
    A newer minor may grow the header and directory entries and use reserved bytes (FORMAT.md 8):
    header_size and entry_size say by how much, extension_byte fills the added bytes, reserved
    goes into the header's reserved bytes [56, 120); a 1.x reader ignores all of them."""
    if version is None:
        version = lowest_version(metadata, [t[2] for t in tables])
    assert header_size >= 128 and header_size % 8 == 0 and entry_size >= 128 and entry_size % 8 == 0
    assert len(reserved) <= 64
    meta = _metadata_block(metadata, metadata_trailing_zeros)
    front_end = header_size + entry_size * len(tables) + len(meta)
    cursor, layout = front_end, []
    for name, role, dtype, array, *extra in tables:
        options = extra[0] if extra else {}
        code = DTYPES[dtype]
        payload = _row_bytes(dtype, array)
        rows, width = payload.shape
        dim = array[0].shape[1] if dtype in ("int8", "int4") else array.shape[1]
        stride = _align(width, 64)
        padded = np.full((rows, stride), options.get("row_fill", 0), dtype=np.uint8)
        padded[:, :width] = payload
        offset = _align(cursor, 4096)
        data = padded.tobytes()
        role_code = ROLES[role] if isinstance(role, str) else role
        layout.append((name, role_code, code, rows, dim, stride, offset, data, options.get("flags", 0)))
        cursor = offset + len(data)
    file_size = cursor + len(FOOTER)

    directory = b""
    for name, role_code, code, rows, dim, stride, offset, data, flags in layout:
        entry = (name.encode() if isinstance(name, str) else name).ljust(64, b"\0")
        entry += struct.pack("<IIQQQQQQII", role_code, code, rows, dim, stride, offset,
                             len(data), xxhash.xxh3_64_intdigest(data), flags, 0)
        directory += entry.ljust(entry_size, bytes([extension_byte]))
    header = MAGIC + struct.pack("<HHIQIIQQQ", version[0], version[1], header_size, file_size, len(tables),
                                 entry_size, header_size, header_size + len(directory), len(meta))
    header = (header + reserved).ljust(120, b"\0")
    extension = bytes([extension_byte]) * (header_size - 128)
    checksum = xxhash.xxh3_64_intdigest(header + extension + directory + meta)
    front = header + struct.pack("<Q", checksum) + extension + directory + meta

    folder = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(front)
            for _, _, _, _, _, _, offset, data, _ in layout:
                out.write(b"\0" * (offset - out.tell()))
                out.write(data)
            out.write(FOOTER)
            assert out.tell() == file_size
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
