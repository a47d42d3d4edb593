#!/usr/bin/env bash
# Makes the Python environment bench/compare.py measures the peers in: torch 2.x from PyPI (its
# FBGEMM embedding_bag kernels included), ONNX Runtime and onnx. Idempotent; benchmarks only (the
# test suite never needs it).
#
#   ./tools/setup-bench-venv.sh                        # creates build/bench-venv (or $EMBEDRT_BENCH_VENV)
#   ./tools/setup-bench-venv.sh --run bench/compare.py build/release/tools/embedrt [args]
#
# torch is installed by tools/setup-hf-venv.sh's recipe (the one that works on this machine: the
# CUDA wheel with --no-deps, four small nvidia wheels, libraries on LD_LIBRARY_PATH), so the two
# stay one source of truth; an existing venv with torch, onnxruntime and onnx is used as it is
# (EMBEDRT_BENCH_VENV=/work/venvs/hf during development avoids a download). Plots are drawn with
# matplotlib from this venv if it has it, else from Debian's python3-matplotlib.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${EMBEDRT_BENCH_VENV:-$PWD/build/bench-venv}
export EMBEDRT_HF_VENV=$venv
if [ ! -x "$venv/bin/python" ] || ! ./tools/setup-hf-venv.sh --run -c "import torch, onnxruntime, onnx, numpy" 2>/dev/null; then
  ./tools/setup-hf-venv.sh
  echo "setup-bench-venv: installing onnxruntime, onnx and matplotlib into $venv" >&2
  "$venv/bin/pip" install -q onnxruntime onnx matplotlib
fi
if [ "${1:-}" = "--run" ]; then
  shift
  exec ./tools/setup-hf-venv.sh --run "$@"
fi
