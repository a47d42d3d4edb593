"""Generates tests/corpus/files/: malformed and malicious checkpoints, each built byte by byte so
it breaks exactly one rule, and tests/corpus/expected.tsv: the refusal each must produce.

The files are committed; this script documents how each was made. Run it with any python3:
    python3 tests/corpus/make_corpus.py
"""
import json
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "files")
expected = []


def emit(name, data, refusal):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
    expected.append((name, refusal))


# ---- pickle pieces -------------------------------------------------------------------------
def unicode(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def glob(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


PROTO2 = b"\x80\x02"


def tensor_pickle(numel=15, shape=(5, 3), stride=(3, 1), offset=0, storage="FloatStorage"):
    """An OrderedDict {'weight': tensor} the way torch.save writes it (protocol 2)."""
    def ints(values):
        return b"(" + b"".join(b"J" + struct.pack("<i", v) for v in values) + b"t"
    pid = b"(" + unicode("storage") + glob("torch", storage) + unicode("0") + unicode("cpu") + \
        b"J" + struct.pack("<i", numel) + b"t"
    return (PROTO2 + glob("collections", "OrderedDict") + b")R" + unicode("weight") +
            glob("torch._utils", "_rebuild_tensor_v2") + b"(" + pid + b"Q" + b"J" + struct.pack("<i", offset) +
            ints(shape) + ints(stride) + b"\x89" + glob("collections", "OrderedDict") + b")R" + b"tR" + b"s.")


# ---- zip assembly with knobs ---------------------------------------------------------------
def make_zip(entries, method=0, bad_crc=None, overlap=False, size_override=None, local_name_override=None):
    """entries: list of (name, bytes). Stored entries, optional damage."""
    out, central = b"", b""
    offsets = []
    for i, (name, data) in enumerate(entries):
        crc = zlib.crc32(data)
        if bad_crc == name:
            crc ^= 0xDEADBEEF
        local_name = (local_name_override or {}).get(name, name).encode()
        offset = len(out)
        offsets.append(offset)
        size = len(data) if size_override is None or size_override[0] != name else size_override[1]
        local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0, crc, size, size, len(local_name), 0)
        out += local + local_name + data
        if overlap and i == 0:
            size += 8  # the directory says the first entry's data runs into the second's header
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0, crc, size, size,
                               len(name.encode()), 0, 0, 0, 0, 0, offset) + name.encode()
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(central), len(out), 0)
    return out + central + end


def torch_zip(pkl, storages=None, extra=(), **knobs):
    storages = {"0": struct.pack("<15f", *range(15))} if storages is None else storages
    entries = [("archive/data.pkl", pkl)] + [(f"archive/data/{k}", v) for k, v in storages.items()]
    entries += [("archive/version", b"3\n")] + list(extra)
    return make_zip(entries, **knobs)


# ---- code execution attempts ---------------------------------------------------------------
emit("os_system.pt", torch_zip(PROTO2 + glob("posix", "system") + b"(" + unicode("touch /tmp/pwned") + b"tR."),
     "global 'posix.system' is not on the allow-list")
emit("builtins_eval.pt", torch_zip(PROTO2 + glob("builtins", "eval") + b"(" + unicode("1+1") + b"tR."),
     "global 'builtins.eval' is not on the allow-list")
emit("stack_global_os_system.pt",
     torch_zip(b"\x80\x04" + b"\x8c\x02os" + b"\x8c\x06system" + b"\x93" + b"(" + unicode("id") + b"tR."),
     "global 'os.system' is not on the allow-list")
emit("inst_opcode.pt", torch_zip(PROTO2 + b"(ios\nsystem\n" + unicode("id") + b"."), "opcode INST (0x69) is refused")
emit("newobj_opcode.pt", torch_zip(PROTO2 + glob("collections", "OrderedDict") + b")\x81."), "opcode NEWOBJ (0x81) is refused")
emit("build_on_global.pt", torch_zip(PROTO2 + glob("collections", "OrderedDict") + b"}b."),
     "BUILD on a global")
emit("reduce_on_string.pt", torch_zip(PROTO2 + unicode("x") + b")R."), "REDUCE on a str, not a global")
emit("subprocess_via_rebuild.pt",
     torch_zip(PROTO2 + glob("torch._tensor", "_rebuild_from_type_v2") + b"(" + glob("subprocess", "Popen") + b"tR."),
     "global 'subprocess.Popen' is not on the allow-list")

# ---- pickle structure ----------------------------------------------------------------------
emit("unknown_opcode.pt", torch_zip(PROTO2 + b"\xff."), "unknown or unsupported opcode 0xff")
emit("stack_underflow.pt", torch_zip(PROTO2 + b"N\x86."), "TUPLE2 with too few values (stack underflow)")
emit("mark_mismatch.pt", torch_zip(PROTO2 + b"Nt."), "TUPLE without a MARK (mark mismatch)")
emit("unclosed_mark.pt", torch_zip(PROTO2 + b"(N."), "STOP with 1 unclosed MARK(s)")
emit("undefined_memo.pt", torch_zip(PROTO2 + b"h\x05."), "memo slot 5 is undefined")
emit("string_longer_than_input.pt", torch_zip(PROTO2 + b"X" + struct.pack("<I", 1_000_000_000) + b"abc."),
     "BINUNICODE of 1000000000 bytes is longer than the")
emit("deep_marks.pt", torch_zip(PROTO2 + b"(" * 5000 + b"."), "MARKs nested deeper than 4096")
deep = PROTO2 + b"}" + b"".join(unicode("k") + b"}" for _ in range(100)) + b"s" * 100 + b"."
emit("deep_dicts.pt", torch_zip(deep), "nesting deeper than 64 levels")
emit("oversized_long.pt", torch_zip(PROTO2 + b"\x8b" + struct.pack("<i", 1_000_000) + b"\x00" * 16 + b"."),
     "integer of 1000000 bytes is oversized")
emit("trailing_after_stop.pt", torch_zip(tensor_pickle() + b"junk"), "4 trailing bytes after STOP")
emit("setitem_on_list.pt", torch_zip(PROTO2 + b"]" + unicode("k") + unicode("v") + b"s."), "SETITEM on a list, not a dict")
emit("protocol_99.pt", torch_zip(b"\x80\x63N."), "pickle protocol 99 is not supported")

# ---- tensors and storages ------------------------------------------------------------------
emit("record_size_mismatch.pt", torch_zip(tensor_pickle(numel=100)),
     "storage '0' declares 100 elements of float32 (400 bytes) but its record holds 60 bytes")
emit("negative_size.pt", torch_zip(tensor_pickle(shape=(-5, 3))), "negative size or stride")
emit("negative_stride.pt", torch_zip(tensor_pickle(stride=(3, -1))), "negative size or stride")
emit("overflowing_shape.pt", torch_zip(tensor_pickle(shape=(2**31 - 1, 2**31 - 1), stride=(2**31 - 1, 1))),
     "reaches element")
emit("view_past_storage.pt", torch_zip(tensor_pickle(offset=10)),
     "reaches element 24, past its storage of 15 elements")
emit("negative_offset.pt", torch_zip(tensor_pickle(offset=-1)), "negative storage offset -1")
emit("missing_record.pt", torch_zip(tensor_pickle(), storages={}), "missing record 'data/0'")
emit("not_a_storage_class.pt", torch_zip(tensor_pickle(storage="Tensor")), "persistent id names 'torch.Tensor', not a storage class")

# ---- zip container -------------------------------------------------------------------------
emit("zip_overlap.pt", torch_zip(tensor_pickle(), overlap=True), "overlaps entry 'archive/data/0'")
emit("zip_entry_leaves_file.pt", torch_zip(tensor_pickle(), size_override=("archive/data/0", 1 << 30)),
     "run past the end of the file")
emit("zip_duplicate_name.pt", make_zip([("archive/data.pkl", tensor_pickle()), ("archive/data.pkl", b"x")]),
     "duplicate entry 'archive/data.pkl'")
emit("zip_path_traversal.pt", torch_zip(tensor_pickle(), extra=[("archive/../../etc/passwd", b"x")]),
     "leaves its folder")
emit("zip_absolute_path.pt", torch_zip(tensor_pickle(), extra=[("/etc/passwd", b"x")]), "is absolute")
emit("zip_bad_crc.pt", torch_zip(tensor_pickle(), bad_crc="archive/data/0"), "CRC-32 is")
emit("zip_compressed.pt", torch_zip(tensor_pickle(), method=8), "is compressed (method 8)")
emit("zip_truncated.pt", torch_zip(tensor_pickle())[:200], "no end-of-central-directory record")
emit("zip_local_name_mismatch.pt", torch_zip(tensor_pickle(), local_name_override={"archive/version": "archive/versioX"}),
     "local header names 'archive/versioX'")
emit("torchscript.pt", torch_zip(tensor_pickle(), extra=[("archive/constants.pkl", b"\x80\x02N.")]),
     "is a TorchScript archive")
emit("big_endian.pt", torch_zip(tensor_pickle(), extra=[("archive/byteorder", b"big")]),
     "byteorder is 'big'")


# ---- safetensors ---------------------------------------------------------------------------
def safetensors(header, data, length=None):
    text = json.dumps(header).encode() if not isinstance(header, bytes) else header
    return struct.pack("<Q", len(text) if length is None else length) + text + data


F32x4 = struct.pack("<4f", 1, 2, 3, 4)
emit("st_header_over_cap.safetensors", safetensors({}, b"", length=200_000_000), "exceeds the 100 MB limit")
emit("st_header_past_file.safetensors", safetensors({}, b"", length=5000), "is longer than the file")
emit("st_not_object.safetensors", safetensors(b"[1, 2]", b""), "header does not start with '{'")
emit("st_bad_json.safetensors", safetensors(b"{\"a\": ", b""), "header is not valid JSON")
emit("st_duplicate.safetensors",
     safetensors(b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}',
                 F32x4), "duplicate tensor name 'a'")
emit("st_overlap.safetensors", safetensors({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                            "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, F32x4[:12]),
     "(overlap)")
# Sizes whose products overflow: int64 strides (UBSan caught this as signed overflow), the
# element count, the byte count, and offsets near 2^64.
emit("st_stride_overflow.safetensors",
     safetensors({"a": {"dtype": "F32", "shape": [0, 1 << 62, 4], "data_offsets": [0, 0]}}, b""),
     "has strides past 2^63 - 1")
emit("st_numel_overflow.safetensors",
     safetensors({"a": {"dtype": "F32", "shape": [1 << 62, 4], "data_offsets": [0, 1 << 62]}}, b""),
     "holds more elements than a tensor can")
emit("st_offsets_huge.safetensors",
     safetensors({"a": {"dtype": "U8", "shape": [1 << 62], "data_offsets": [0, 1 << 62]},
                  "b": {"dtype": "U8", "shape": [1 << 62], "data_offsets": [1 << 62, 1 << 63]}}, b""),
     "is past the data buffer")
emit("st_gap.safetensors", safetensors({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, F32x4), "(gap)")
emit("st_size_mismatch.safetensors", safetensors({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}}, F32x4),
     "hold 16 bytes, shape [3] of float32 needs 12")
emit("st_trailing_bytes.safetensors", safetensors({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, F32x4),
     "tensors cover 8 bytes of a 16-byte data buffer")
emit("st_offsets_past_buffer.safetensors",
     safetensors({"a": {"dtype": "F32", "shape": [1 << 20], "data_offsets": [0, 4 << 20]}}, F32x4), "is past the data buffer")
emit("st_unknown_dtype.safetensors", safetensors({"a": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}}, F32x4),
     "dtype 'F128' is not supported")
emit("st_overflow_shape.safetensors",
     safetensors({"a": {"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 16]}}, F32x4), "holds more elements than a tensor can")

# ---- Hugging Face index --------------------------------------------------------------------
emit("index_traversal.index.json", json.dumps({"weight_map": {"w": "../outside.safetensors"}}).encode(),
     "is not a file name inside the model folder")
emit("index_absolute.index.json", json.dumps({"weight_map": {"w": "/etc/passwd"}}).encode(),
     "is not a file name inside the model folder")
emit("index_no_weight_map.index.json", b'{"metadata": {}}', 'no "weight_map" object')

# ---- legacy format -------------------------------------------------------------------------
legacy_header = (PROTO2 + b"\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little") + b"." +
                 PROTO2 + b"M" + struct.pack("<H", 1001) + b"." + PROTO2 + b"}.")
legacy_object = tensor_pickle().replace(b"J\x0f\x00\x00\x00t", b"J\x0f\x00\x00\x00Nt")  # 6-tuple persistent id
legacy_keys = PROTO2 + b"]" + unicode("0") + b"a."
emit("legacy_truncated_storage.pt", legacy_header + legacy_object + legacy_keys + struct.pack("<q", 15) + b"\x00" * 20,
     "runs past the end of the file")
emit("legacy_trailing.pt", legacy_header + legacy_object + legacy_keys + struct.pack("<q", 15) + b"\x00" * 60 + b"xx",
     "2 trailing bytes after the last storage")

with open(os.path.join(HERE, "expected.tsv"), "w") as f:
    f.write("# file\trefusal that `embedrt inspect FILE` must print (exit 1)\n")
    for name, refusal in expected:
        f.write(f"{name}\t{refusal}\n")
print(f"{len(expected)} corpus files")
