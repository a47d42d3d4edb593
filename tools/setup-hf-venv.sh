#!/usr/bin/env bash
# Makes the Python environment that regenerates tests/hf/ (torch 2.x + transformers 5.x from
# PyPI; Debian's torch is too old for transformers). Only needed to regenerate the committed
# fixtures: the test suite itself runs without it. Idempotent.
#
#   ./tools/setup-hf-venv.sh                       # creates build/hf-venv (or $EMBEDRT_HF_VENV)
#   ./tools/setup-hf-venv.sh --run tests/hf/generate.py [args]   # runs a script in it
#
# PyPI's Linux torch wheel is the CUDA build and links CUDA libraries even on a CPU: four of them
# come as small wheels (installed with --no-deps, or pip pulls several GB), the rest from the
# image's /usr/local/cuda/lib64. No GPU is used.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${EMBEDRT_HF_VENV:-$PWD/build/hf-venv}
python=$venv/bin/python
site() { "$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
with_libs() {
  local sp
  sp=$(site)
  LD_LIBRARY_PATH="$sp/nvidia/nccl/lib:$sp/nvidia/cu13/lib:$sp/nvidia/nvshmem/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" "$@"
}
if [ ! -x "$python" ] || ! with_libs "$python" -c "import torch, transformers, safetensors" 2>/dev/null; then
  echo "setup-hf-venv: installing torch and transformers into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --no-deps torch nvidia-cufile nvidia-cusparselt-cu13 nvidia-nvshmem-cu13 nvidia-nccl-cu13
  "$venv/bin/pip" install -q filelock typing_extensions sympy networkx jinja2 fsspec numpy "setuptools>=77"
  "$venv/bin/pip" install -q transformers safetensors tokenizers
  with_libs "$python" -c "import torch, transformers; print('setup-hf-venv: torch', torch.__version__, 'transformers', transformers.__version__)" >&2
fi
if [ "${1:-}" = "--run" ]; then
  shift
  with_libs "$python" "$@"
fi
