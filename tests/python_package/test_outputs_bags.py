"""Several named outputs (Gemma 3n), pooled bags (model2vec, torch's EmbeddingBag) and prefetch
from Python, against the bits the reference implementations recorded in the committed fixtures
(tests/hf/cases/gemma3n_text, tests/bags), converted with embedrt.convert."""
import json

import ml_dtypes
import numpy as np
import pytest

import embedrt

from conftest import REPO

GEMMA3N = REPO / "tests" / "hf" / "cases" / "gemma3n_text"
BAGS = REPO / "tests" / "bags"


def want_bits(record):
    return np.frombuffer(bytes.fromhex(record["output_hex"]),
                         dtype=np.uint32 if record["output_dtype"] == "f32" else np.uint16)


@pytest.fixture(scope="module")
def gemma3n(tmp_path_factory):
    path = tmp_path_factory.mktemp("gemma3n") / "g.embt"
    embedrt.convert(GEMMA3N / "model", path)
    return embedrt.Model(path), json.loads((GEMMA3N / "expected.json").read_text())


def test_outputs_are_listed(gemma3n):
    model, _ = gemma3n
    names = [(o.name, o.shape, o.dtype, o.pooling) for o in model.outputs]
    assert names == [("inputs_embeds", (24,), "bf16", "none"), ("per_layer_inputs", (2, 12), "bf16", "none")]


def test_each_output_equals_transformers(gemma3n):
    model, expected = gemma3n
    run = expected["runs"][0]
    ids = np.asarray(run["input_ids"])
    for name, record in run["outputs"].items():
        got = model.embed(ids, output=name)
        assert got.dtype == ml_dtypes.bfloat16 and list(got.shape) == record["shape"]
        assert np.array_equal(got.view(np.uint16).ravel(), want_bits(record)), name
    both = model.embed(ids, output=["per_layer_inputs", "inputs_embeds"])
    assert list(both) == ["per_layer_inputs", "inputs_embeds"]
    for name, record in run["outputs"].items():
        assert np.array_equal(both[name].view(np.uint16).ravel(), want_bits(record)), name


def test_several_outputs_into_the_callers_arrays(gemma3n):
    model, expected = gemma3n
    run = expected["runs"][0]
    ids = np.asarray(run["input_ids"])
    out = {"inputs_embeds": np.zeros((2, 7, 24), np.float32), "per_layer_inputs": np.zeros((2, 7, 2, 12), np.float32)}
    result = model.embed(ids, output=list(out), out=out)
    assert result["inputs_embeds"] is out["inputs_embeds"]
    # An f32 output is the product before transformers rounds it to bf16: rounded, the same bits.
    rounded = out["per_layer_inputs"].astype(ml_dtypes.bfloat16).view(np.uint16).ravel()
    assert np.array_equal(rounded, want_bits(run["outputs"]["per_layer_inputs"]))


def test_output_refusals_name_the_argument(gemma3n):
    model, _ = gemma3n
    with pytest.raises(embedrt.InvalidArgumentError, match="'logits' is not an output of the model"):
        model.embed([1, 2], output="logits")
    with pytest.raises(embedrt.InvalidArgumentError, match="named twice"):
        model.embed([1, 2], output=["inputs_embeds", "inputs_embeds"])
    with pytest.raises(embedrt.InvalidArgumentError, match="a dict of arrays"):
        model.embed([1, 2], output=["inputs_embeds"], out=np.zeros((2, 24), np.float32))
    with pytest.raises(embedrt.OutOfRangeError, match="output 'inputs_embeds'.*id 64 is out of range"):
        model.embed([1, 64], output=["inputs_embeds", "per_layer_inputs"])
    # per_layer_inputs alone maps ids past its table to row 0, as transformers does.
    row0 = model.embed([0], output="per_layer_inputs")
    assert np.array_equal(model.embed([1000], output="per_layer_inputs"), row0)


def test_prefetch(gemma3n):
    model, _ = gemma3n
    assert model.prefetch([1, 2, 99999]) is None
    assert model.prefetch(np.asarray([3]), output="per_layer_inputs", page_in=True) is None
    with pytest.raises(embedrt.InvalidArgumentError):
        model.prefetch([1], output="nope")


def test_model2vec_encode(tmp_path):
    manifest = json.loads((BAGS / "model2vec" / "manifest.json").read_text())
    for name in ("plain", "quantized"):
        m = manifest["models"][name]
        path = tmp_path / f"{name}.embt"
        embedrt.convert(BAGS / "model2vec" / m["folder"], path)
        model = embedrt.Model(path)
        assert (model.outputs[0].pooling, model.outputs[0].normalize) == ("mean", True)
        for run in m["runs"]:
            offsets = np.cumsum([0] + [len(s) for s in run["ids"]])
            flat = np.asarray([i for s in run["ids"] for i in s], dtype=np.int64)
            got = model.pool(flat, offsets, normalize=run["normalize"])
            assert got.dtype == np.float16 and list(got.shape) == run["shape"]
            want = want_bits(run)
            if name == "plain":  # bit-exact; the quantized model sums in f64 (tests/bags/README.md)
                assert np.array_equal(got.view(np.uint16).ravel(), want), run["max_length"]
            else:
                ulps = np.abs(got.view(np.uint16).ravel().astype(np.int64) - want.astype(np.int64))
                assert ulps.max() <= 1, run["max_length"]


def test_rows_as_bags_with_padding(tmp_path):
    manifest = json.loads((BAGS / "model2vec" / "manifest.json").read_text())
    m = manifest["models"]["plain"]
    path = tmp_path / "m2v.embt"
    embedrt.convert(BAGS / "model2vec" / m["folder"], path)
    model = embedrt.Model(path)
    run = m["runs"][0]
    width = max(len(s) for s in run["ids"])
    padded = np.zeros((len(run["ids"]), width), np.int64)
    for k, sentence in enumerate(run["ids"]):
        padded[k, :len(sentence)] = sentence
    got = model.pool(padded, padding_id=0)
    assert np.array_equal(got.view(np.uint16).ravel(), want_bits(run))


def test_embedding_bag_cases(tmp_path):
    manifest = json.loads((BAGS / "embedding_bag" / "manifest.json").read_text())
    tables = {t["name"]: t for t in manifest["tables"]}
    cases = [c for c in manifest["cases"] if c["path"] == "fbgemm" and c["output_dtype"] == "f32"]
    assert len(cases) >= 10
    models = {}
    for c in cases:
        if c["table"] not in models:
            path = tmp_path / (c["table"] + ".embt")
            embedrt.convert(BAGS / "embedding_bag" / tables[c["table"]]["state_dict"], path, pooling="sum")
            models[c["table"]] = embedrt.Model(path)
        bounds = c["offsets"] if c["include_last_offset"] else c["offsets"] + [len(c["indices"])]
        got = models[c["table"]].pool(np.asarray(c["indices"], np.int64), bounds, mode=c["mode"],
                                      weights=c["per_sample_weights"])
        want = want_bits(c)
        nan = np.isnan(got.ravel()) & np.isnan(want.view(np.float32))
        assert np.array_equal(got.view(np.uint32).ravel()[~nan], want[~nan]), (c["table"], c["mode"])


def test_pool_refusals(tmp_path, gpt2_like):
    path, _, _ = gpt2_like
    model = embedrt.Model(path)
    with pytest.raises(embedrt.UnsupportedError, match="adds positions"):
        model.pool([[1, 2]], mode="sum")
    manifest = json.loads((BAGS / "model2vec" / "manifest.json").read_text())
    m2v = tmp_path / "m.embt"
    embedrt.convert(BAGS / "model2vec" / manifest["models"]["plain"]["folder"], m2v)
    bags = embedrt.Model(m2v)
    with pytest.raises(embedrt.InvalidArgumentError, match="offsets"):
        bags.pool([1, 2, 3])
    with pytest.raises(embedrt.InvalidArgumentError, match="mode"):
        bags.pool([[1, 2]], mode="median")
    with pytest.raises(embedrt.InvalidArgumentError, match="weights"):
        bags.pool([1, 2], [0, 2], weights=[1.0])
    with pytest.raises(embedrt.InvalidArgumentError, match="offsets must hold"):
        bags.pool([1, 2], [0, 1])
    with pytest.raises(embedrt.OutOfRangeError, match="bag 0, position 1"):
        bags.pool([1, 10 ** 9], [0, 2])
