"""Fixtures of the embedrt Python package's tests: small models written by the independent Python
writer of the format (tools/python/embt_writer.py) from tables whose expected outputs numpy
computes on its own.

tools/test.sh runs this suite twice: without torch (build/python-venv, `-m "not torch"`) and with
torch and transformers (`-m torch`). A skipped test fails the run: nothing here may silently not run.
"""
import importlib.util
import os
import pathlib
import sys

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "python"))
from embt_writer import write_embt  # noqa: E402

VOCAB, DIM, CONTEXT = 50, 24, 16
# test_torch.py imports torch; where there is none it is not collected. tools/test.sh runs it with
# `-m torch` in the torch venv, where an empty selection (exit code 5) fails the run.
collect_ignore = [] if importlib.util.find_spec("torch") else ["test_torch.py"]


def pytest_configure(config):
    config.addinivalue_line("markers", "torch: needs torch (and transformers); tools/test.sh runs these in the hf venv")


def pytest_sessionfinish(session, exitstatus):
    skipped = session.config.pluginmanager.get_plugin("terminalreporter").stats.get("skipped", [])
    if skipped and exitstatus == 0:
        session.exitstatus = 1
        print(f"\nconftest: {len(skipped)} test(s) skipped; this suite counts a skip as a failure", file=sys.stderr)


def tables(seed=0, vocab=VOCAB, dim=DIM, context=CONTEXT):
    """Token and position tables whose sums are exact in float32 (multiples of 1/64, small)."""
    rng = np.random.default_rng(seed)
    tok = (rng.integers(-512, 512, size=(vocab, dim)) / 64).astype(np.float32)
    pos = (rng.integers(-512, 512, size=(context, dim)) / 64).astype(np.float32)
    return tok, pos


@pytest.fixture(scope="session")
def gpt2_like(tmp_path_factory):
    """A GPT-2-shaped f32 model: out = tok[id] + pos[start + t]."""
    tok, pos = tables()
    path = tmp_path_factory.mktemp("models") / "gpt2_like.embt"
    write_embt(str(path), [("wte", "token", "f32", tok), ("wpe", "position", "f32", pos)],
               {"model.family": "gpt2", "position.kind": "learned", "context_length": CONTEXT})
    return path, tok, pos


@pytest.fixture(scope="session")
def bert_like(tmp_path_factory):
    """A BERT-shaped f32 model with token types and a LayerNorm."""
    tok, pos = tables(seed=1)
    rng = np.random.default_rng(2)
    seg = (rng.integers(-512, 512, size=(2, DIM)) / 64).astype(np.float32)
    weight = (1 + rng.integers(-8, 8, size=(1, DIM)) / 64).astype(np.float32)
    bias = (rng.integers(-8, 8, size=(1, DIM)) / 64).astype(np.float32)
    path = tmp_path_factory.mktemp("models") / "bert_like.embt"
    write_embt(str(path), [("word", "token", "f32", tok), ("position", "position", "f32", pos),
                           ("token_type", "segment", "f32", seg), ("ln.weight", "norm_weight", "f32", weight),
                           ("ln.bias", "norm_bias", "f32", bias)],
               {"model.family": "bert", "position.kind": "learned", "context_length": CONTEXT, "norm.epsilon": 1e-12})
    return path, tok, pos, seg, weight[0], bias[0]


@pytest.fixture(scope="session")
def bf16_lookup(tmp_path_factory):
    """A Llama-shaped bf16 model (the lookup alone): its natural output dtype is bf16."""
    tok, _ = tables(seed=3)
    path = tmp_path_factory.mktemp("models") / "bf16_lookup.embt"
    write_embt(str(path), [("embed_tokens", "token", "bf16", tok)], {"model.family": "llama", "source.dtype": "bfloat16"})
    return path, tok  # every value is a multiple of 1/64 below 8: exact in bf16


@pytest.fixture(scope="session")
def cli():
    """The embedrt CLI of the Release build (tools/test.sh builds it first), to compare with."""
    path = pathlib.Path(os.environ.get("EMBEDRT_CLI", REPO / "build" / "release" / "tools" / "embedrt"))
    assert path.is_file(), f"{path} is missing: build the CLI first (tools/test.sh does), or set EMBEDRT_CLI"
    return path
