"""Model.embed against numpy: every argument form, output dtype and shape (the expected values are
computed here from the tables the fixtures wrote, never by embedrt)."""
import ml_dtypes
import numpy as np
import pytest

import embedrt
from conftest import CONTEXT, DIM, VOCAB

IDS = np.array([[3, 1, 4, 1, 5], [9, 2, 6, 5, VOCAB - 1]], dtype=np.int64)


def gpt2_reference(tok, pos, ids, starts=0, positions=None):
    ids = np.asarray(ids)
    if positions is None:
        length = ids.shape[-1]
        starts = np.broadcast_to(np.asarray(starts).reshape(-1, 1), ids.reshape(-1, length).shape[:1] + (1,))
        positions = (starts + np.arange(length)).reshape(ids.shape)
    return tok[ids] + pos[np.asarray(positions)]


def layer_norm_reference(x, weight, bias, eps):
    x = x.astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


@pytest.fixture(scope="module")
def gpt2(gpt2_like):
    path, tok, pos = gpt2_like
    with embedrt.Model(path) as model:
        yield model, tok, pos


def test_batch_of_sequences_is_token_plus_position_rows(gpt2):
    model, tok, pos = gpt2
    out = model.embed(IDS)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == (2, 5, DIM)
    assert out.flags.c_contiguous and out.flags.writeable
    np.testing.assert_array_equal(out, gpt2_reference(tok, pos, IDS))


def test_results_outlive_the_model(gpt2_like):
    import gc
    path, tok, pos = gpt2_like
    model = embedrt.Model(path)
    outs = [model.embed(IDS), model.embed(IDS, dtype="bf16"), model.embed(IDS, dtype="f16")]
    model.close()
    del model
    gc.collect()
    np.testing.assert_array_equal(outs[0], gpt2_reference(tok, pos, IDS))
    np.testing.assert_array_equal(outs[1].astype(np.float32), outs[0].astype(ml_dtypes.bfloat16).astype(np.float32))
    np.testing.assert_array_equal(outs[2], outs[0].astype(np.float16))


def test_one_sequence_gives_a_two_dimensional_result(gpt2):
    model, tok, pos = gpt2
    out = model.embed(IDS[1])
    assert out.shape == (5, DIM)
    np.testing.assert_array_equal(out, gpt2_reference(tok, pos, IDS[1]))


@pytest.mark.parametrize("form", ["int32", "list", "tuple", "memoryview"])
def test_ids_in_any_integer_form(gpt2, form):
    model, tok, pos = gpt2
    ids = {"int32": IDS.astype(np.int32), "list": IDS.tolist(), "tuple": tuple(map(tuple, IDS.tolist())),
           "memoryview": memoryview(IDS)}[form]
    np.testing.assert_array_equal(model.embed(ids), gpt2_reference(tok, pos, IDS))


@pytest.mark.parametrize("view", ["every_other", "reversed", "transposed", "column"])
def test_strided_ids_are_read_through_their_strides(gpt2, view):
    model, tok, pos = gpt2
    wide = np.arange(40, dtype=np.int64).reshape(4, 10) % VOCAB
    ids = {"every_other": wide[:, ::2], "reversed": wide[::-1, ::-1], "transposed": wide[:, :4].T,
           "column": wide[:, 3]}[view]
    assert not ids.flags.c_contiguous
    np.testing.assert_array_equal(model.embed(ids), gpt2_reference(tok, pos, np.ascontiguousarray(ids)))


def test_starts_continue_each_sequence_at_its_cached_length(gpt2):
    model, tok, pos = gpt2
    starts = np.array([0, 7], dtype=np.int64)
    np.testing.assert_array_equal(model.embed(IDS, starts=starts), gpt2_reference(tok, pos, IDS, starts=starts))
    np.testing.assert_array_equal(model.embed(IDS, starts=3), gpt2_reference(tok, pos, IDS, starts=3))
    np.testing.assert_array_equal(model.embed(IDS, starts=[2, 4]), gpt2_reference(tok, pos, IDS, starts=[2, 4]))
    np.testing.assert_array_equal(model.embed(IDS[0], starts=np.int32(5)), gpt2_reference(tok, pos, IDS[0], starts=5))


def test_decode_step_one_token_per_sequence(gpt2):
    model, tok, pos = gpt2
    ids = np.array([[7], [8]], dtype=np.int64)
    out = model.embed(ids, starts=[CONTEXT - 1, 0])
    np.testing.assert_array_equal(out[0, 0], tok[7] + pos[CONTEXT - 1])
    np.testing.assert_array_equal(out[1, 0], tok[8] + pos[0])


def test_explicit_positions(gpt2):
    model, tok, pos = gpt2
    positions = np.array([[0, 0, 1, 1, 2], [15, 14, 13, 0, 3]], dtype=np.int32)
    np.testing.assert_array_equal(model.embed(IDS, positions=positions),
                                  gpt2_reference(tok, pos, IDS, positions=positions))


def test_out_is_written_in_place_and_returned(gpt2):
    model, tok, pos = gpt2
    out = np.full((2, 5, DIM), np.nan, dtype=np.float32)
    assert model.embed(IDS, out=out) is out
    np.testing.assert_array_equal(out, gpt2_reference(tok, pos, IDS))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_16_bit_outputs_round_to_nearest_even(gpt2, dtype):
    model, tok, pos = gpt2
    expected = gpt2_reference(tok, pos, IDS).astype(dtype)  # numpy's and ml_dtypes' own rounding
    out = np.zeros((2, 5, DIM), dtype=dtype)
    assert model.embed(IDS, out=out) is out
    np.testing.assert_array_equal(out.view(np.uint16), expected.view(np.uint16))
    made = model.embed(IDS, dtype=dtype)
    assert made.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(made.view(np.uint16), expected.view(np.uint16))


@pytest.mark.parametrize("name,expected", [("f32", np.float32), ("float32", np.float32), ("bf16", ml_dtypes.bfloat16),
                                           ("bfloat16", ml_dtypes.bfloat16), ("f16", np.float16), ("float16", np.float16),
                                           (np.dtype(np.float16), np.float16), (np.float32, np.float32)])
def test_dtype_names(gpt2, name, expected):
    model, _, _ = gpt2
    assert model.embed(IDS, dtype=name).dtype == np.dtype(expected)


def test_bf16_model_answers_in_bf16_by_default(bf16_lookup):
    path, tok = bf16_lookup
    with embedrt.Model(path) as model:
        assert model.outputs[0].dtype == "bf16" and model.table_dtype == "bf16"
        out = model.embed(IDS)
        assert out.dtype == np.dtype(ml_dtypes.bfloat16)
        np.testing.assert_array_equal(out.astype(np.float32), tok[IDS].astype(ml_dtypes.bfloat16).astype(np.float32))
        np.testing.assert_array_equal(model.embed(IDS, dtype="f32"), tok[IDS].astype(ml_dtypes.bfloat16).astype(np.float32))


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4), (0, 0)])
def test_empty_requests(gpt2, shape):
    model, _, _ = gpt2
    out = model.embed(np.zeros(shape, dtype=np.int64))
    assert out.shape == shape + (DIM,) and out.dtype == np.float32
    out = np.zeros(shape + (DIM,), dtype=np.float32)
    assert model.embed(np.zeros(shape, dtype=np.int32), out=out) is out
    assert model.embed([]).shape == (0, DIM)


def test_bert_segments_and_layer_norm(bert_like):
    path, tok, pos, seg, weight, bias = bert_like
    segments = np.array([[0, 0, 1, 1, 1], [1, 0, 1, 0, 0]], dtype=np.int64)
    with embedrt.Model(path) as model:
        out = model.embed(IDS, segments=segments)
        typed = layer_norm_reference(tok[IDS] + seg[segments] + pos[np.arange(5)], weight, bias, 1e-12)
        np.testing.assert_allclose(out, typed, rtol=0, atol=4e-6 * np.abs(typed).max())
        untyped = layer_norm_reference(tok[IDS] + seg[0] + pos[np.arange(5)], weight, bias, 1e-12)
        np.testing.assert_allclose(model.embed(IDS), untyped, rtol=0, atol=4e-6 * np.abs(untyped).max())


def test_large_requests_on_every_thread_count_agree(tmp_path):
    """Past 256 KiB of output the work is split over an arena: threads=1, 2 and the default agree."""
    from conftest import write_embt
    rng = np.random.default_rng(5)
    tok = rng.standard_normal((1000, 384)).astype(np.float32)
    pos = rng.standard_normal((1024, 384)).astype(np.float32)
    path = tmp_path / "wide.embt"
    write_embt(str(path), [("wte", "token", "f32", tok), ("wpe", "position", "f32", pos)],
               {"model.family": "gpt2", "position.kind": "learned", "context_length": 1024})
    ids = rng.integers(0, 1000, size=(8, 1024))
    expected = tok[ids] + pos[np.arange(1024)]
    with embedrt.Model(path, residency="populate") as model:
        for threads in (None, 1, 2, 3):
            out = model.embed(ids, threads=threads)
            assert out.ctypes.data % 64 == 0  # new outputs are cache-line aligned
            np.testing.assert_array_equal(out, expected)


def test_model_properties(gpt2_like, bert_like):
    path, tok, pos = gpt2_like
    with embedrt.Model(str(path)) as model:
        assert model.dim == DIM and model.vocab_size == VOCAB and model.max_positions == CONTEXT
        assert model.path == str(path) and not model.closed
        assert model.isa in embedrt.supported_isas() and model.isa == embedrt.isa()
        assert model.metadata["model.family"] == "gpt2" and model.metadata["context_length"] == CONTEXT
        [output] = model.outputs
        assert (output.name, output.dim, output.shape, output.dtype) == ("embeddings", DIM, (DIM,), "f32")
        assert [(t["name"], t["role"], t["dtype"], t["shape"]) for t in model.tables] == [
            ("wte", "token", "f32", [VOCAB, DIM]), ("wpe", "position", "f32", [CONTEXT, DIM])]
        assert "family=gpt2" in repr(model) and "dim=24" in repr(model)
        model.verify()
    with embedrt.Model(bert_like[0]) as model:
        assert model.metadata["norm.epsilon"] == 1e-12
        assert [t["role"] for t in model.tables] == ["token", "position", "segment", "norm_weight", "norm_bias"]


def test_residency_populate_and_pathlike(gpt2_like):
    path, tok, pos = gpt2_like
    with embedrt.Model(path, residency="populate") as model:
        np.testing.assert_array_equal(model.embed(IDS), gpt2_reference(tok, pos, IDS))
    with embedrt.Model(bytes(path)) as model:
        assert model.dim == DIM
    with embedrt.Model(path, lock_in_memory=True) as model:  # a few KiB: within any mlock limit
        np.testing.assert_array_equal(model.embed(IDS), gpt2_reference(tok, pos, IDS))


def test_residency_copy_is_immune_to_the_file(gpt2_like, tmp_path):
    path, tok, pos = gpt2_like
    private = tmp_path / "private.embt"
    private.write_bytes(open(path, "rb").read())
    with embedrt.Model(private, residency="copy") as model:
        private.write_bytes(b"\0" * private.stat().st_size)  # the file's rows overwritten in place
        np.testing.assert_array_equal(model.embed(IDS), gpt2_reference(tok, pos, IDS))


def test_memory_choices_change_no_value(gpt2_like):
    """prefetch_level, nontemporal, cache_bytes and min_rows_ahead reach the Embedder
    (prefetch_levels and min_rows_ahead read back its choices) and never change a result: this
    table of a few KiB is cached, so its rows go to L1 whatever was asked, unless the cache is said
    to be one byte; then L2 is taken where asked if the ISA has L2 kernels (the wheel compiles
    them). threads= makes another Embedder: the same choices."""
    path, tok, pos = gpt2_like
    expected = gpt2_reference(tok, pos, IDS)
    for level in ("auto", "l1", "l2"):
        for stream in ("auto", "always", "never"):
            for cache in (None, 1):
                with embedrt.Model(path, prefetch_level=level, nontemporal=stream, cache_bytes=cache) as model:
                    has_l2_kernels = model.isa in ("avx2", "avx512", "avx512bf16")
                    if cache is None or level == "l1":
                        assert model.prefetch_levels == {"embeddings": "l1"}
                    elif level == "l2":
                        assert model.prefetch_levels == {"embeddings": "l2" if has_l2_kernels else "l1"}
                    else:  # auto, rows from memory: the machine's calibration, either level
                        assert model.prefetch_levels["embeddings"] in ("l1", "l2")
                    np.testing.assert_array_equal(model.embed(IDS), expected)
                    np.testing.assert_array_equal(model.embed(IDS, threads=1), expected)
    # min_rows_ahead: as asked for rows from memory (a cache of one byte), 4 for cached rows.
    for rows in (None, 4, 256):
        for cache in (None, 1):
            with embedrt.Model(path, prefetch_level="l2", min_rows_ahead=rows, cache_bytes=cache) as model:
                assert model.min_rows_ahead == {"embeddings": 4 if cache is None or rows is None else rows}
                np.testing.assert_array_equal(model.embed(IDS), expected)
                np.testing.assert_array_equal(model.embed(IDS, threads=1), expected)


def test_module_information():
    assert embedrt.__version__.count(".") == 2 and embedrt.format_version == "2.0"
    assert embedrt.supported_isas()[0] == "scalar"
    embedrt.install_fault_guard()  # idempotent, process-wide
    embedrt.install_fault_guard()
