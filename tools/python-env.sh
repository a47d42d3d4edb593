# Sourced by the project's scripts: which Python runs what, decided here once.
#   EMBEDRT_TORCH_PYTHON  Debian's python3 with python3-torch, numpy and xxhash (tools/install-deps.sh
#                         installs them); torch.save fixtures, parity tests, comparisons.
# Override it in the environment to use another interpreter with those packages.
EMBEDRT_TORCH_PYTHON=${EMBEDRT_TORCH_PYTHON:-/usr/bin/python3}
export EMBEDRT_TORCH_PYTHON
