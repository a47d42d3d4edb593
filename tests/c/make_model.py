"""Writes the C API test's models: tok[r][j] = r + j/8 (vocab 10, dim 5), pos[p][j] = 100 p
(8 positions), so every sum is exact; and the same with a second output "extra" (format 1.2):
extra[r][j] = 1000 + 10 r + j (4 rows of 2 x 3), ids past its rows reading row 0.
usage: /usr/bin/python3 make_model.py TOOLS_PYTHON OUT OUT_WITH_TWO_OUTPUTS"""
import sys

import numpy as np

sys.path.insert(0, sys.argv[1])
from embt_writer import write_embt  # noqa: E402

tok = np.array([[r + j / 8 for j in range(5)] for r in range(10)], dtype=np.float32)
pos = np.array([[100 * p] * 5 for p in range(8)], dtype=np.float32)
write_embt(sys.argv[2], [("tok", "token", "f32", tok), ("pos", "position", "f32", pos)],
           {"model.family": "gpt2", "position.kind": "learned", "context_length": 8})

extra = np.array([[1000 + 10 * r + j for j in range(6)] for r in range(4)], dtype=np.float32)
write_embt(sys.argv[3], [("tok", "token", "f32", tok), ("pos", "position", "f32", pos), ("extra", "other", "f32", extra)],
           {"model.family": "gpt2", "position.kind": "learned", "context_length": 8, "outputs.extra.token": "extra",
            "outputs.extra.shape": "2,3", "outputs.extra.ids.out_of_range": "row0"})
