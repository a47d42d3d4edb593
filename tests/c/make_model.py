"""Writes the C API test's model: tok[r][j] = r + j/8 (vocab 10, dim 5), pos[p][j] = 100 p
(8 positions), so every sum is exact. usage: /usr/bin/python3 make_model.py TOOLS_PYTHON OUT"""
import sys

import numpy as np

sys.path.insert(0, sys.argv[1])
from embt_writer import write_embt  # noqa: E402

tok = np.array([[r + j / 8 for j in range(5)] for r in range(10)], dtype=np.float32)
pos = np.array([[100 * p] * 5 for p in range(8)], dtype=np.float32)
write_embt(sys.argv[2], [("tok", "token", "f32", tok), ("pos", "position", "f32", pos)],
           {"model.family": "gpt2", "position.kind": "learned", "context_length": 8})
