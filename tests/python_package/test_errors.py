"""Every bad input is a Python exception with the library's message and code, naming the argument;
nothing is written on an error; nothing crashes."""
import errno
import os

import numpy as np
import pytest

import embedrt
from conftest import CONTEXT, DIM, VOCAB

IDS = np.array([[3, 1, 4], [1, 5, 9]], dtype=np.int64)


@pytest.fixture(scope="module")
def model(gpt2_like):
    with embedrt.Model(gpt2_like[0]) as m:
        yield m


def raises(kind, field, *fragments):
    """pytest.raises for an embedrt error of this class and field whose message has every fragment."""
    class Check:
        def __enter__(self):
            self.context = pytest.raises(kind)
            self.info = self.context.__enter__()
            return self.info

        def __exit__(self, *exc):
            handled = self.context.__exit__(*exc)
            error = self.info.value
            assert isinstance(error, embedrt.Error)
            assert error.field == field, (error.field, str(error))
            for fragment in fragments:
                assert fragment in str(error), (fragment, str(error))
            return handled
    return Check()


@pytest.mark.parametrize("ids,fragment", [
    (IDS.astype(np.float64), "dtype float64; expected int32 or int64"),
    (IDS.astype(np.uint8), "dtype uint8"),
    (IDS.astype(np.uint64), "dtype uint64"),
    (IDS.astype(bool), "dtype bool"),
    (IDS.astype(np.int16), "dtype int16"),
    ([1.5, 2], "dtype float64"),
    (["a", "b"], "not integers"),
    ([[1, 2], [3]], "cannot be read as an array"),
    ([2 ** 70], "not integers"),
    (np.zeros((2, 2, 2), dtype=np.int64), "3 dimensions"),
    (np.int64(3), "a single value"),
    (7, "a single value"),
    ("3 1 4", "got str"),
    ({"ids": 1}, "got dict"),
    (None, "got NoneType"),
    (object(), "got object"),
])
def test_ids_that_are_not_integer_arrays(model, ids, fragment):
    with raises(embedrt.InvalidArgumentError, "ids", "ids: ", fragment) as info:
        model.embed(ids)
    assert isinstance(info.value, ValueError) and info.value.code == "invalid-argument"


@pytest.mark.parametrize("bad,dtype", [(-1, np.int64), (VOCAB, np.int64), (2 ** 40, np.int64), (2 ** 63 - 1, np.int64),
                                       (-(2 ** 63), np.int64), (2 ** 31 - 1, np.int32), (-(2 ** 31), np.int32)])
def test_ids_out_of_range_name_the_token_and_write_nothing(model, bad, dtype):
    ids = IDS.astype(dtype)
    ids[1, 2] = bad
    out = np.full((2, 3, DIM), np.nan, dtype=np.float32)
    with raises(embedrt.OutOfRangeError, "ids", f"ids: sequence 1, position 2: id {bad} is out of range [0, {VOCAB})") as info:
        model.embed(ids, out=out)
    error = info.value
    assert isinstance(error, ValueError) and error.code == "out-of-range"
    assert (error.sequence, error.position) == (1, 2)
    assert np.isnan(out).all()


def test_positions_and_starts_are_checked(model):
    with raises(embedrt.InvalidArgumentError, "positions", "shape (2, 2); expected (2, 3)"):
        model.embed(IDS, positions=np.zeros((2, 2), dtype=np.int64))
    with raises(embedrt.InvalidArgumentError, "positions", "shape (3,); expected (2, 3)"):
        model.embed(IDS, positions=[0, 1, 2])
    with raises(embedrt.OutOfRangeError, "positions", f"position {CONTEXT} is out of range [0, {CONTEXT})"):
        model.embed(IDS, positions=np.full((2, 3), CONTEXT))
    with raises(embedrt.OutOfRangeError, "starts", f"is past the limit of {CONTEXT} positions"):
        model.embed(IDS, starts=CONTEXT - 2)
    with raises(embedrt.OutOfRangeError, "starts", "sequence 1, position 0"):
        model.embed(IDS, starts=[0, CONTEXT])
    with raises(embedrt.InvalidArgumentError, "starts", "-1 at index 1 is negative"):
        model.embed(IDS, starts=[0, -1])
    with raises(embedrt.InvalidArgumentError, "starts", "-4 at index 0 is negative"):
        model.embed(IDS, starts=-4)
    with raises(embedrt.InvalidArgumentError, "starts", "one start per sequence (2 values); got 3 values"):
        model.embed(IDS, starts=[0, 1, 2])
    with raises(embedrt.InvalidArgumentError, "starts", "past the range of int64"):
        model.embed(IDS, starts=2 ** 64)
    with raises(embedrt.OutOfRangeError, "starts", f"position {2 ** 63 - 1} is past the limit"):
        model.embed(IDS, starts=2 ** 63 - 1)
    with raises(embedrt.InvalidArgumentError, "starts", "exclude each other"):
        model.embed(IDS, positions=np.zeros((2, 3), dtype=np.int64), starts=0)
    with raises(embedrt.InvalidArgumentError, "starts", "dtype float64"):
        model.embed(IDS, starts=np.array([0.0, 1.0]))


def test_segments_need_a_segment_table(model, bert_like):
    with raises(embedrt.InvalidArgumentError, "segments", "the model has no segment table"):
        model.embed(IDS, segments=np.zeros((2, 3), dtype=np.int64))
    with embedrt.Model(bert_like[0]) as bert:
        with raises(embedrt.OutOfRangeError, "segments", "sequence 0, position 1: segment 2 is out of range [0, 2)"):
            bert.embed(IDS, segments=[[0, 2, 0], [0, 0, 0]])
        with raises(embedrt.InvalidArgumentError, "segments", "shape (2,); expected (2, 3)"):
            bert.embed(IDS, segments=[0, 1])


@pytest.mark.parametrize("out,fragment", [
    (np.zeros((2, 3, DIM + 1), dtype=np.float32), f"shape (2, 3, {DIM + 1}); expected (2, 3, {DIM})"),
    (np.zeros((6, DIM), dtype=np.float32), f"shape (6, {DIM}); expected (2, 3, {DIM})"),
    (np.zeros((2, 3, DIM), dtype=np.float64), "dtype float64; expected float32, bfloat16 or float16"),
    (np.zeros((2, 3, DIM), dtype=np.int32), "dtype int32"),
    (np.zeros((2, 3, 2 * DIM), dtype=np.float32)[:, :, ::2], "is not C-contiguous"),
    (np.zeros((3, 2, DIM), dtype=np.float32).transpose(1, 0, 2), "is not C-contiguous"),
    (np.zeros((2, 3, DIM), dtype=np.float32).tolist(), "expected a writable CPU array"),
    (bytearray(2 * 3 * DIM * 4), "dtype uint8"),
    (bytes(2 * 3 * DIM * 4), "is read-only"),
])
def test_bad_outputs_name_out(model, out, fragment):
    with raises(embedrt.InvalidArgumentError, "out", "out: ", fragment):
        model.embed(IDS, out=out)


def test_read_only_out_is_refused_and_untouched(model):
    out = np.full((2, 3, DIM), 7, dtype=np.float32)
    out.flags.writeable = False
    with raises(embedrt.InvalidArgumentError, "out", "out: is read-only"):
        model.embed(IDS, out=out)
    assert (out == 7).all()


def test_dtype_is_checked(model):
    for bad in ("float64", "int8", "nope", 3, np.int32):
        with raises(embedrt.InvalidArgumentError, "dtype", "dtype: "):
            model.embed(IDS, dtype=bad)
    with raises(embedrt.InvalidArgumentError, "dtype", "dtype: f16 but out is f32"):
        model.embed(IDS, dtype="f16", out=np.zeros((2, 3, DIM), dtype=np.float32))


@pytest.mark.parametrize("threads", [0, -1, 10 ** 9, 2 ** 80, True, "2", 2.0])
def test_threads_is_checked(model, threads):
    with raises(embedrt.InvalidArgumentError, "threads", "threads: "):
        model.embed(IDS, threads=threads)


def test_unknown_arguments_are_type_errors(model):
    with pytest.raises(TypeError):
        model.embed(IDS, position_ids=IDS)
    with pytest.raises(TypeError):
        model.embed()


def test_closed_model(gpt2_like):
    model = embedrt.Model(gpt2_like[0])
    model.close()
    model.close()
    assert model.closed and "closed" in repr(model)
    for use in (lambda: model.embed(IDS), lambda: model.dim, lambda: model.metadata, lambda: model.outputs, model.verify):
        with pytest.raises(embedrt.InvalidArgumentError, match="the model is closed"):
            use()
    with embedrt.Model(gpt2_like[0]) as other:
        pass
    assert other.closed


def test_files_that_cannot_be_opened(tmp_path, gpt2_like):
    with pytest.raises(embedrt.NotFoundError) as info:
        embedrt.Model(tmp_path / "missing.embt")
    assert isinstance(info.value, FileNotFoundError) and info.value.errno == errno.ENOENT
    assert "missing.embt" in str(info.value) and info.value.code == "not-found"
    with pytest.raises(embedrt.InvalidArgumentError, match="is not a regular file"):
        embedrt.Model(tmp_path)
    garbage = tmp_path / "garbage.embt"
    garbage.write_bytes(b"definitely not a model" * 100)
    with pytest.raises(embedrt.BadFileError) as info:
        embedrt.Model(garbage)
    assert isinstance(info.value, OSError) and info.value.code == "bad-magic"
    empty = tmp_path / "empty.embt"
    empty.write_bytes(b"")
    with pytest.raises(embedrt.BadFileError, match="is empty"):
        embedrt.Model(empty)
    truncated = tmp_path / "truncated.embt"
    truncated.write_bytes(gpt2_like[0].read_bytes()[:5000])
    with pytest.raises(embedrt.BadFileError) as info:
        embedrt.Model(truncated)
    assert info.value.code == "malformed"
    with pytest.raises(embedrt.InvalidArgumentError, match="path: contains a NUL byte"):
        embedrt.Model("model\0.embt")
    with pytest.raises(embedrt.InvalidArgumentError, match="path: expected a path"):
        embedrt.Model(3)
    with pytest.raises(embedrt.InvalidArgumentError, match="residency: 'swap'; expected 'mmap', 'populate' or 'copy'"):
        embedrt.Model(gpt2_like[0], residency="swap")
    with pytest.raises(embedrt.InvalidArgumentError, match="prefetch_level: 'l3'; expected 'auto', 'l1' or 'l2'"):
        embedrt.Model(gpt2_like[0], prefetch_level="l3")
    with pytest.raises(embedrt.InvalidArgumentError, match="nontemporal: 'sometimes'; expected 'auto', 'always' or 'never'"):
        embedrt.Model(gpt2_like[0], nontemporal="sometimes")
    for bad in (0, -1, 2**64):
        with pytest.raises(embedrt.InvalidArgumentError, match=f"cache_bytes: expected a positive number of bytes; got {bad}"):
            embedrt.Model(gpt2_like[0], cache_bytes=bad)
    with pytest.raises(embedrt.InvalidArgumentError, match="cache_bytes: expected an int or None"):
        embedrt.Model(gpt2_like[0], cache_bytes=True)
    for bad in (-1, 2**64):
        with pytest.raises(embedrt.InvalidArgumentError, match=f"min_rows_ahead: expected 4 to 256 rows; got {bad}"):
            embedrt.Model(gpt2_like[0], min_rows_ahead=bad)
    for bad in (0, 3, 257):
        with pytest.raises(embedrt.InvalidArgumentError, match=rf"min_rows_ahead {bad} is outside \[4, 256\]"):
            embedrt.Model(gpt2_like[0], min_rows_ahead=bad)
    with pytest.raises(embedrt.InvalidArgumentError, match="min_rows_ahead: expected an int or None"):
        embedrt.Model(gpt2_like[0], min_rows_ahead=8.0)


def test_damaged_table_is_found_by_verify(tmp_path, gpt2_like):
    damaged = tmp_path / "damaged.embt"
    data = bytearray(gpt2_like[0].read_bytes())
    data[8192 + 5] ^= 0x40  # inside the first table (tables start on pages)
    damaged.write_bytes(bytes(data))
    with embedrt.Model(damaged) as model:  # opening reads no table data: O(1)
        with pytest.raises(embedrt.BadFileError, match="wte") as info:
            model.verify()
        assert info.value.code == "checksum-mismatch"
    with pytest.raises(embedrt.BadFileError, match="wte"):
        embedrt.verify(damaged)


class DLPackRaises:
    def __dlpack__(self, *args, **kwargs):
        raise RuntimeError("no")

    def __dlpack_device__(self):
        return (1, 0)


class DLPackNotACapsule:
    def __dlpack__(self, *args, **kwargs):
        return 42

    def __dlpack_device__(self):
        return (1, 0)


@pytest.mark.parametrize("hostile", [DLPackRaises(), DLPackNotACapsule()])
def test_hostile_array_objects(model, hostile):
    with raises(embedrt.InvalidArgumentError, "ids", "expected int32 or int64 values"):
        model.embed(hostile)
    with raises(embedrt.InvalidArgumentError, "out", "expected a writable CPU array"):
        model.embed(IDS, out=hostile)


def test_error_classes_and_codes():
    assert issubclass(embedrt.OutOfRangeError, ValueError) and issubclass(embedrt.InvalidArgumentError, ValueError)
    for cls in (embedrt.NotFoundError, embedrt.AlreadyExistsError, embedrt.NoSpaceError, embedrt.BadFileError,
                embedrt.OperatingSystemError):
        assert issubclass(cls, OSError) and issubclass(cls, embedrt.Error)
    assert issubclass(embedrt.UnsupportedError, NotImplementedError)
    assert embedrt.NotFoundError("x").code == "not-found"


def test_isa_override_is_read_by_new_models(gpt2_like, monkeypatch):
    monkeypatch.setenv("EMBEDRT_ISA", "scalar")
    with embedrt.Model(gpt2_like[0]) as model:
        assert model.isa == "scalar"
    monkeypatch.setenv("EMBEDRT_ISA", "mmx")
    with pytest.raises(embedrt.InvalidArgumentError, match="mmx"):
        embedrt.Model(gpt2_like[0])
    monkeypatch.setenv("EMBEDRT_ISA", "")
    assert embedrt.isa() == embedrt.supported_isas()[-1]
    assert os.environ["EMBEDRT_ISA"] == ""
