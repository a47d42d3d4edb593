#!/usr/bin/env bash
# The main job, end to end: install, build Release, make a GPT-2-shaped model from PyTorch
# embedding tables (vocab 50257, dim 768, context 1024), inspect and verify it, embed a batch,
# and print a throughput figure beside the machine's memory-copy bandwidth.
# Last, the Python package is built and installed into a venv, and used in three lines.
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/install-deps.sh
source tools/python-env.sh

build=build/release
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --parallel "$(nproc)"
embedrt="$build/tools/embedrt"
"$embedrt" --version

work=${EMBEDRT_QUICKSTART_DIR:-build/quickstart}
mkdir -p "$work"
checkpoint="$work/gpt2_state_dict.pt"
model="$work/gpt2.embt"
if [ ! -f "$checkpoint" ]; then
  echo "==> torch.save of a GPT-2-shaped state dict (vocab 50257, dim 768, context 1024) -> $checkpoint"
  "$EMBEDRT_TORCH_PYTHON" - "$checkpoint" <<'PY'
import sys
import torch
torch.manual_seed(0)
# The layout of transformers' GPT2LMHeadModel.state_dict(): embeddings, one block, final norm,
# and lm_head tied to the token table (saved once, as torch.save does for shared storage).
wte, wpe = torch.nn.Embedding(50257, 768), torch.nn.Embedding(1024, 768)
torch.nn.init.normal_(wte.weight, std=0.02)
torch.nn.init.normal_(wpe.weight, std=0.01)
state = {"transformer.wte.weight": wte.weight, "transformer.wpe.weight": wpe.weight,
         "transformer.h.0.ln_1.weight": torch.ones(768), "transformer.h.0.ln_1.bias": torch.zeros(768),
         "transformer.h.0.attn.c_attn.weight": torch.randn(768, 2304) * 0.02,
         "transformer.h.0.attn.c_attn.bias": torch.zeros(2304),
         "transformer.ln_f.weight": torch.ones(768), "transformer.ln_f.bias": torch.zeros(768),
         "lm_head.weight": wte.weight}
torch.save(state, sys.argv[1])
PY
fi

echo "==> embedrt convert (no Python, no pickle code executed)"
"$embedrt" convert "$checkpoint" -o "$model" --force
echo "==> inspect"
"$embedrt" inspect "$model"
echo "==> verify"
"$embedrt" verify "$model"
echo "==> embed 2 sequences of 3 tokens (first 4 values of each vector)"
"$embedrt" embed "$model" --ids 464,2068,7586,21831,18045,625 --batch 2 | cut -d' ' -f1-6

echo "==> throughput: embedrt bench (GPT-2 shape, 8 x 1024 tokens, all cores) beside its roofline"
"$embedrt" bench "$model" --batch 8 --seq 1024 --seconds 1
"$embedrt" bench "$model" --roofline --seconds 1   # the same bytes streamed in order: the limit
echo "==> single-token decode latency"
"$embedrt" bench "$model" --batch 1 --seq 1 --threads 1 --seconds 1 | grep latency

echo "==> the Python package: pip install . into build/python-venv (tools/setup-python-venv.sh), then three lines"
./tools/setup-python-venv.sh
build/python-venv/bin/python - "$model" <<'PY'
import sys, embedrt
model = embedrt.Model(sys.argv[1])
print(model, "\n", model.embed([[464, 2068, 7586], [21831, 18045, 625]])[:, :, :4])
PY
