"""embedrt.convert, embedrt.inspect and embedrt.verify: checkpoints written by the real safetensors
package, and the same information `embedrt inspect --json` prints."""
import json
import subprocess

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

import embedrt

VOCAB, DIM, CONTEXT = 64, 32, 20


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    """A Hugging Face GPT-2 folder: config.json and model.safetensors (plus a block the converter ignores)."""
    folder = tmp_path_factory.mktemp("gpt2")
    rng = np.random.default_rng(11)
    wte = rng.standard_normal((VOCAB, DIM)).astype(np.float32)
    wpe = rng.standard_normal((CONTEXT, DIM)).astype(np.float32)
    save_file({"transformer.wte.weight": wte, "transformer.wpe.weight": wpe,
               "transformer.h.0.ln_1.weight": np.ones(DIM, dtype=np.float32)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": DIM, "vocab_size": VOCAB,
                                                    "n_positions": CONTEXT}))
    return folder, wte, wpe


def test_convert_then_embed(gpt2_folder, tmp_path):
    folder, wte, wpe = gpt2_folder
    dst = tmp_path / "gpt2.embt"
    report = embedrt.convert(folder, dst)
    assert report["path"] == str(dst) and report["recipe"] == "gpt2" and report["table_dtype"] == "f32"
    assert "model_type" in report["evidence"] and report["rules"] == "wte[id] + wpe[start + t]"
    assert [(t["role"], t["shape"], t["exact"]) for t in report["tables"]] == [
        ("token", [VOCAB, DIM], True), ("position", [CONTEXT, DIM], True)]
    ids = np.array([[0, 5, VOCAB - 1], [7, 7, 7]])
    with embedrt.Model(dst) as model:
        assert model.metadata["model.family"] == "gpt2"
        np.testing.assert_array_equal(model.embed(ids, starts=[0, 4]),
                                      wte[ids] + wpe[np.array([[0, 1, 2], [4, 5, 6]])])


def test_convert_to_bf16_rounds_like_ml_dtypes(gpt2_folder, tmp_path):
    folder, wte, wpe = gpt2_folder
    dst = tmp_path / "gpt2-bf16.embt"
    report = embedrt.convert(str(folder / "model.safetensors"), str(dst), dtype="bf16", preset="gpt2")
    assert report["table_dtype"] == "bf16" and not report["tables"][0]["exact"]
    assert 0 < report["tables"][0]["max_abs_error"] < 0.05
    with embedrt.Model(dst) as model:
        out = model.embed([3, 4], dtype="f32")
    bf16 = lambda a: a.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(out, bf16(wte[[3, 4]]) + bf16(wpe[[0, 1]]))  # rows rounded, the sum in f32


def test_convert_refusals(gpt2_folder, tmp_path):
    folder, _, _ = gpt2_folder
    dst = tmp_path / "exists.embt"
    dst.write_bytes(b"keep me")
    with pytest.raises(embedrt.AlreadyExistsError, match="pass force=True") as info:
        embedrt.convert(folder, dst)
    assert isinstance(info.value, FileExistsError) and info.value.field == "dst"
    assert dst.read_bytes() == b"keep me"
    embedrt.convert([folder / "model.safetensors"], dst, force=True, config=folder / "config.json")
    assert embedrt.inspect(dst)["metadata"]["model.family"] == "gpt2"
    with pytest.raises(embedrt.NotFoundError):
        embedrt.convert(tmp_path / "missing.safetensors", tmp_path / "a.embt")
    with pytest.raises(embedrt.InvalidArgumentError, match="dtype: 'f64'"):
        embedrt.convert(folder, tmp_path / "a.embt", dtype="f64")
    with pytest.raises(embedrt.Error, match="nope"):
        embedrt.convert(folder, tmp_path / "a.embt", preset="nope")
    with pytest.raises(embedrt.InvalidArgumentError, match="exclude each other"):
        embedrt.convert(folder, tmp_path / "a.embt", config=folder / "config.json", ignore_config=True)
    with pytest.raises(embedrt.InvalidArgumentError, match="context"):
        embedrt.convert(folder, tmp_path / "a.embt", positions="sinusoidal")
    with pytest.raises(embedrt.NotFoundError, match="no tensor named 'nothing'"):
        embedrt.convert(folder, tmp_path / "a.embt", token="nothing")
    with pytest.raises(embedrt.InvalidArgumentError, match="src: is an empty list"):
        embedrt.convert([], tmp_path / "a.embt")
    with pytest.raises(TypeError):
        embedrt.convert(folder, tmp_path / "a.embt", "bf16")  # options are keyword-only
    assert not (tmp_path / "a.embt").exists()


def test_inspect_is_what_the_cli_prints(gpt2_folder, tmp_path, cli):
    folder, _, _ = gpt2_folder
    dst = tmp_path / "gpt2.embt"
    embedrt.convert(folder, dst)
    for path in (dst, folder, folder / "model.safetensors"):
        printed = json.loads(subprocess.run([str(cli), "inspect", str(path), "--json"], check=True,
                                            capture_output=True, text=True).stdout)
        assert embedrt.inspect(path) == printed
    described = embedrt.inspect(folder)
    assert described["recipe"]["name"] == "gpt2"
    assert {t["name"] for t in described["tensors"]} >= {"transformer.wte.weight", "transformer.wpe.weight"}
    with embedrt.Model(dst) as model:
        assert model.metadata == embedrt.inspect(dst)["metadata"]
        assert model.tables == embedrt.inspect(dst)["tables"]


def test_verify(gpt2_folder, tmp_path):
    folder, _, _ = gpt2_folder
    dst = tmp_path / "gpt2.embt"
    embedrt.convert(folder, dst)
    assert embedrt.verify(dst) is None
    with pytest.raises(embedrt.NotFoundError):
        embedrt.verify(tmp_path / "missing.embt")
    with pytest.raises(embedrt.BadFileError, match="bad magic|not an .embt"):
        embedrt.verify(folder / "model.safetensors")
