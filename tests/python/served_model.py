"""What the server scripts (test_server.py, test_grpc.py, test_server_outputs.py) share: the tally of
checks (tests/support/tally.py), a small BERT-shaped model whose tables are a function of a seed, its expected embeddings
computed by numpy, and a free loopback port."""

import os
import socket
import sys

import numpy as np

from embt_writer import write_embt  # tools/python, put on sys.path by each script from its argv

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from tally import Tally  # noqa: E402,F401  (re-exported)


VOCAB, DIM, CONTEXT, TYPES = 100, 16, 32, 2


def tables(seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((VOCAB, DIM), dtype=np.float32), rng.standard_normal((CONTEXT, DIM), dtype=np.float32),
            rng.standard_normal((TYPES, DIM), dtype=np.float32))


def write_model(path, seed):
    """The model of `seed`, written atomically (temp + rename, as write_embt does), as a user
    replacing a served file should."""
    tok, pos, seg = tables(seed)
    write_embt(path, [("tok", "token", "f32", tok), ("seg", "segment", "f32", seg), ("pos", "position", "f32", pos)],
               {"model.family": "bert", "position.kind": "learned", "context_length": CONTEXT})


def expected(seed, ids, starts=None, segments=None):
    tok, pos, seg = tables(seed)
    ids = np.asarray(ids)
    B, L = ids.shape
    starts = np.zeros(B, dtype=np.int64) if starts is None else np.asarray(starts)
    segments = np.zeros_like(ids) if segments is None else np.asarray(segments)
    positions = starts[:, None] + np.arange(L)[None, :]
    return (tok[ids] + seg[segments]) + pos[positions]  # the order of FORMAT.md section 7


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
