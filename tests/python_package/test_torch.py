"""torch tensors in and out through DLPack, embedrt.torch, and the transformers example (logits bit
for bit). Needs torch and transformers: tools/test.sh runs these (`-m torch`) in the venv that
tools/setup-hf-venv.sh makes."""
import importlib.util
import re

import ml_dtypes
import numpy as np
import pytest
import torch

import embedrt
import embedrt.torch
from conftest import DIM, REPO, VOCAB, write_embt

pytestmark = pytest.mark.torch
IDS = torch.tensor([[3, 1, 4, 1, 5], [9, 2, 6, 5, VOCAB - 1]])


@pytest.fixture(scope="module")
def gpt2(gpt2_like):
    path, tok, pos = gpt2_like
    with embedrt.Model(path) as model:
        yield model, torch.from_numpy(tok), torch.from_numpy(pos)


def test_torch_ids_of_either_width_and_any_strides(gpt2):
    model, tok, pos = gpt2
    expected = (tok[IDS] + pos[:5]).numpy()
    for ids in (IDS, IDS.to(torch.int32), IDS.t().contiguous().t()):
        np.testing.assert_array_equal(model.embed(ids), expected)
    wide = torch.arange(40).reshape(4, 10) % VOCAB
    np.testing.assert_array_equal(model.embed(wide[:, ::2]), (tok[wide[:, ::2]] + pos[:5]).numpy())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_torch_outputs_written_in_place_or_made(gpt2, dtype):
    model, tok, pos = gpt2
    expected = (tok[IDS] + pos[:5]).to(dtype)  # torch's own rounding
    out = torch.full((2, 5, DIM), float("nan"), dtype=dtype)
    assert model.embed(IDS, out=out) is out
    assert torch.equal(out, expected)
    made = model.embed(IDS, dtype=dtype)
    assert isinstance(made, torch.Tensor) and made.dtype == dtype and made.is_contiguous()
    assert torch.equal(made, expected)
    assert made.data_ptr() % 64 == 0


def test_bad_torch_outputs(gpt2):
    model, _, _ = gpt2
    for out, fragment in [(torch.zeros(2, 5, DIM, requires_grad=True), "requires grad"),
                          (torch.zeros(2, 5, 2 * DIM)[:, :, ::2], "not C-contiguous"),
                          (torch.zeros(2, 5, DIM, dtype=torch.float64), "dtype float64"),
                          (torch.zeros(2, 5, DIM + 1), f"expected (2, 5, {DIM})")]:
        with pytest.raises(embedrt.InvalidArgumentError, match=re.escape(fragment)):
            model.embed(IDS, out=out)
    with pytest.raises(embedrt.InvalidArgumentError, match="dtype float32"):
        model.embed(IDS.float())


def test_bf16_numpy_and_torch_agree(gpt2):
    model, _, _ = gpt2
    from_numpy = model.embed(IDS.numpy(), dtype=ml_dtypes.bfloat16)
    from_torch = model.embed(IDS, dtype=torch.bfloat16)
    assert np.array_equal(from_numpy.view(np.uint16), from_torch.view(torch.int16).numpy().view(np.uint16))


def test_inputs_embeds_of_a_lookup_model(bf16_lookup):
    path, tok = bf16_lookup
    with embedrt.Model(path) as model:
        embeds = embedrt.torch.inputs_embeds(model, IDS)
        assert embeds.dtype == torch.bfloat16 and embeds.shape == (2, 5, DIM)
        assert torch.equal(embeds, torch.from_numpy(tok)[IDS].to(torch.bfloat16))
        as_f32 = embedrt.torch.inputs_embeds(model, IDS[0], dtype=torch.float32)
        assert as_f32.dtype == torch.float32 and as_f32.shape == (5, DIM)
        out = torch.empty(2, 5, DIM, dtype=torch.bfloat16)
        assert embedrt.torch.inputs_embeds(model, IDS, out=out) is out
        with pytest.raises(embedrt.InvalidArgumentError, match="torch dtype"):
            embedrt.torch.inputs_embeds(model, IDS, dtype="f32")


def test_inputs_embeds_refuses_what_the_model_would_apply_twice(gpt2_like, bert_like, tmp_path):
    with embedrt.Model(gpt2_like[0]) as gpt2:
        with pytest.raises(embedrt.UnsupportedError, match="adds position table"):
            embedrt.torch.inputs_embeds(gpt2, IDS)
    with embedrt.Model(bert_like[0]) as bert:
        with pytest.raises(embedrt.UnsupportedError, match="norm_bias, norm_weight, position, segment"):
            embedrt.torch.inputs_embeds(bert, IDS)
    scaled = tmp_path / "scaled.embt"
    write_embt(str(scaled), [("embed_tokens", "token", "f32", np.ones((VOCAB, DIM), dtype=np.float32))],
               {"model.family": "custom", "token.scale": 2.0})
    with embedrt.Model(scaled) as model:
        with pytest.raises(embedrt.UnsupportedError, match="scales the token row"):
            embedrt.torch.inputs_embeds(model, IDS)


def test_transformers_logits_from_embedrt_are_bit_exact(capsys):
    path = REPO / "runtime" / "python" / "examples" / "transformers_inputs_embeds.py"
    spec = importlib.util.spec_from_file_location("transformers_inputs_embeds", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.main([]) == 0
    printed = capsys.readouterr().out
    assert printed.count("bit-exact") == 2 and "llama:" in printed and "gemma3_text:" in printed, printed


def test_tensor_subclasses_that_misbehave(gpt2):
    """A subclass whose numpy() returns itself or raises is read through DLPack instead."""
    model, tok, pos = gpt2

    class Itself(torch.Tensor):
        def numpy(self, *args, **kwargs):
            return self

    class Raises(torch.Tensor):
        def numpy(self, *args, **kwargs):
            raise RuntimeError("no numpy today")

    expected = (tok[IDS] + pos[:5]).numpy()
    for cls in (Itself, Raises):
        np.testing.assert_array_equal(model.embed(IDS.as_subclass(cls)), expected)
        out = torch.zeros(2, 5, DIM).as_subclass(cls)
        assert model.embed(IDS, out=out) is out
        np.testing.assert_array_equal(out.as_subclass(torch.Tensor).numpy(), expected)
