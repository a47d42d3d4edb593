#!/usr/bin/env bash
# The main job, end to end: install, build Release, make a GPT-2-shaped model from PyTorch
# embedding tables (vocab 50257, dim 768, context 1024), inspect and verify it, embed a batch,
# and print a throughput figure beside the machine's memory-copy bandwidth.
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/install-deps.sh

build=build/release
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --parallel "$(nproc)"
embedrt="$build/tools/embedrt"
"$embedrt" --version

work=${EMBEDRT_QUICKSTART_DIR:-build/quickstart}
mkdir -p "$work"
model="$work/gpt2.embt"
echo "==> creating $model from torch.nn.Embedding tables"
/usr/bin/python3 - "$model" <<'PY'
import sys
import torch
sys.path.insert(0, "tools/python")
from embt_writer import write_embt
torch.manual_seed(0)
wte, wpe = torch.nn.Embedding(50257, 768), torch.nn.Embedding(1024, 768)
write_embt(sys.argv[1],
           [("transformer.wte.weight", "token", "f32", wte.weight.detach().numpy()),
            ("transformer.wpe.weight", "position", "f32", wpe.weight.detach().numpy())],
           {"model.family": "gpt2", "source.dtype": "float32", "context_length": 1024,
            "position.kind": "learned"})
PY

echo "==> inspect"
"$embedrt" inspect "$model"
echo "==> verify"
"$embedrt" verify "$model"
echo "==> embed 2 sequences of 3 tokens (first 4 values of each vector)"
"$embedrt" embed "$model" --ids 464,2068,7586,21831,18045,625 --batch 2 | cut -d' ' -f1-6

echo "==> throughput (reference path, GPT-2 shape, 8 x 1024 tokens) beside memcpy bandwidth"
"$build/bench/embedrt_bench_reference" --benchmark_min_time=0.3 \
  --benchmark_filter='BM_ReferenceEmbed/8/1024|BM_MemcpyRoofline' 2>/dev/null |
  awk '/^BM_/ { line = sprintf("%-34s", $1); for (i = 2; i <= NF; ++i) if ($i ~ /=/) line = line "  " $i; print line }'
