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
DTYPES = {"f32": (1, np.float32), "f16": (2, np.float16)}


def _align(x, a):
    return (x + a - 1) // a * a


def _metadata_block(metadata):
    block = b""
    for key, value in metadata.items():
        if isinstance(value, str):
            kind, payload = 4, value.encode()
        elif isinstance(value, float):
            kind, payload = 3, struct.pack("<d", value)
        else:
            kind, payload = 1, struct.pack("<Q", value)
        record = struct.pack("<HBBI", len(key), kind, 0, len(payload)) + key.encode() + payload
        block += record + b"\0" * (_align(len(record), 8) - len(record))
    return block


def write_embt(path, tables, metadata):
    """tables: list of (name, role, dtype, array [rows, dim]); metadata: {key: str|int|float}."""
    meta = _metadata_block(metadata)
    front_end = 128 + 128 * len(tables) + len(meta)
    cursor, layout = front_end, []
    for name, role, dtype, array in tables:
        code, np_type = DTYPES[dtype]
        rows, dim = array.shape
        stride = _align(dim * np.dtype(np_type).itemsize, 64)
        padded = np.zeros((rows, stride), dtype=np.uint8)
        padded[:, : dim * np.dtype(np_type).itemsize] = (
            np.ascontiguousarray(array, dtype=np_type).view(np.uint8).reshape(rows, -1))
        offset = _align(cursor, 4096)
        data = padded.tobytes()
        layout.append((name, role, code, rows, dim, stride, offset, data))
        cursor = offset + len(data)
    file_size = cursor + len(FOOTER)

    directory = b""
    for name, role, code, rows, dim, stride, offset, data in layout:
        directory += name.encode().ljust(64, b"\0")
        directory += struct.pack("<IIQQQQQQII", ROLES[role], code, rows, dim, stride, offset,
                                 len(data), xxhash.xxh3_64_intdigest(data), 0, 0)
    header = MAGIC + struct.pack("<HHIQIIQQQ", 1, 0, 128, file_size, len(tables), 128, 128,
                                 128 + len(directory), len(meta))
    header = header.ljust(120, b"\0")
    checksum = xxhash.xxh3_64_intdigest(header + directory + meta)
    front = header + struct.pack("<Q", checksum) + directory + meta

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
