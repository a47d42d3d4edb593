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
DTYPES = {"f32": 1, "f16": 2, "bf16": 3, "int8": 4}


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
    codes, scale, bias = array  # int8 rowwise: codes [rows, dim] int8, scale and bias [rows] f32
    rows, dim = codes.shape
    out = np.zeros((rows, _align(dim, 4) + 8), dtype=np.uint8)
    out[:, :dim] = np.ascontiguousarray(codes, dtype=np.int8).view(np.uint8)
    out[:, _align(dim, 4):_align(dim, 4) + 4] = np.asarray(scale, dtype=np.float32).reshape(rows, 1).view(np.uint8)
    out[:, _align(dim, 4) + 4:] = np.asarray(bias, dtype=np.float32).reshape(rows, 1).view(np.uint8)
    return out


def _align(x, a):
    return (x + a - 1) // a * a


def _metadata_block(metadata):
    block = b""
    for key, value in metadata.items():
        if isinstance(value, str):
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
    return block


def write_embt(path, tables, metadata, version=(1, 0), header_size=128, entry_size=128):
    """tables: list of (name, role, dtype, array [rows, dim]) (int8: (codes, scale, bias));
    metadata: {key: str|bytes|int|float}. A newer minor may grow the header and directory
    entries (FORMAT.md 8): header_size and entry_size say by how much (zero-filled)."""
    meta = _metadata_block(metadata)
    front_end = header_size + entry_size * len(tables) + len(meta)
    cursor, layout = front_end, []
    for name, role, dtype, array in tables:
        code = DTYPES[dtype]
        payload = _row_bytes(dtype, array)
        rows, width = payload.shape
        dim = array[0].shape[1] if dtype == "int8" else array.shape[1]
        stride = _align(width, 64)
        padded = np.zeros((rows, stride), dtype=np.uint8)
        padded[:, :width] = payload
        offset = _align(cursor, 4096)
        data = padded.tobytes()
        layout.append((name, role, code, rows, dim, stride, offset, data))
        cursor = offset + len(data)
    file_size = cursor + len(FOOTER)

    directory = b""
    for name, role, code, rows, dim, stride, offset, data in layout:
        entry = (name.encode() if isinstance(name, str) else name).ljust(64, b"\0")
        entry += struct.pack("<IIQQQQQQII", ROLES[role], code, rows, dim, stride, offset,
                             len(data), xxhash.xxh3_64_intdigest(data), 0, 0)
        directory += entry.ljust(entry_size, b"\0")
    header = MAGIC + struct.pack("<HHIQIIQQQ", version[0], version[1], header_size, file_size, len(tables),
                                 entry_size, header_size, header_size + len(directory), len(meta))
    header = header.ljust(120, b"\0")
    extension = b"\0" * (header_size - 128)
    checksum = xxhash.xxh3_64_intdigest(header + extension + directory + meta)
    front = header + struct.pack("<Q", checksum) + extension + directory + meta

    folder = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(front)
            for _, _, _, _, _, _, offset, data in layout:
                out.write(b"\0" * (offset - out.tell()))
                out.write(data)
            out.write(FOOTER)
            assert out.tell() == file_size
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
