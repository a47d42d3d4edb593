"""The reference path of `embedrt embed` against PyTorch itself.

Tables come from torch.nn.Embedding modules and are written by tools/python/embt_writer.py (an
implementation of docs/FORMAT.md independent of the C++ writer); the expected output is what
torch computes. f32 and f16 tables must match bit for bit (the arithmetic is the same: one f32
add of two exactly decoded values).

usage: /usr/bin/python3 test_reference_parity.py EMBEDRT_CLI TOOLS_PYTHON_DIR
"""
import json
import subprocess
import sys
import tempfile

import numpy as np
import torch

cli, tools_dir = sys.argv[1], sys.argv[2]
sys.path.insert(0, tools_dir)
from embt_writer import write_embt  # noqa: E402

passed = failed = 0


def check(name, condition, detail=""):
    global passed, failed
    if condition:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {name} {detail}")


def embed(model, ids, batch, start):
    run = subprocess.run([cli, "embed", model, "--ids", ",".join(map(str, ids)), "--batch", str(batch),
                          "--start", str(start), "--json", "--out-dtype", "f32"], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(run.stderr)
    doc = json.loads(run.stdout)
    return np.array(doc["data"], dtype=np.float64).astype(np.float32).reshape(doc["shape"])


def case(folder, name, dim, dtype, offset, with_position):
    torch.manual_seed(dim * 7 + offset)
    vocab, context, batch, length = 101, 40, 3, 5
    tok = torch.nn.Embedding(vocab, dim)
    pos = torch.nn.Embedding(context + offset, dim)
    if dtype == "f16":
        tok, pos = tok.half(), pos.half()
    ids = torch.randint(0, vocab, (batch, length))
    ids[0, 0], ids[-1, -1] = 0, vocab - 1  # the first and last rows
    start = 7
    with torch.no_grad():
        expected = tok(ids).float()
        if with_position:
            positions = torch.arange(start, start + length) + offset
            expected = expected + pos(positions).float()
    tables = [("tok", "token", dtype, tok.weight.detach().numpy())]
    metadata = {"model.family": "custom", "position.kind": "none"}
    if with_position:
        tables.append(("pos", "position", dtype, pos.weight.detach().numpy()))
        metadata.update({"position.kind": "learned", "position.offset": offset, "context_length": context})
    path = f"{folder}/{name}.embt"
    write_embt(path, tables, metadata)
    got = embed(path, ids.flatten().tolist(), batch, start)
    want = expected.numpy()
    check(name, got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32)),
          f"max abs diff {np.abs(got - want).max() if got.shape == want.shape else got.shape}")


with tempfile.TemporaryDirectory() as folder:
    for dim in (1, 3, 17, 769):
        for dtype in ("f32", "f16"):
            case(folder, f"gpt2-{dtype}-{dim}", dim, dtype, 0, True)
    case(folder, "opt-offset-2", 17, "f32", 2, True)
    case(folder, "llama-no-positions", 17, "f32", 0, False)

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
