#!/usr/bin/env bash
# Makes the Python environment of the gRPC tests and load test: the real KServe/Triton client
# (tritonclient[grpc], which brings grpcio and protobuf) from PyPI, plus hpack (HTTP/2 header blocks, for the hostile tests that write frames by hand) and xxhash for the project's
# .embt writer. Idempotent: a venv that already imports them is left alone.
#
#   ./tools/setup-grpc-venv.sh            # creates build/grpc-venv (or $EMBEDRT_GRPC_VENV); prints its python
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${EMBEDRT_GRPC_VENV:-$PWD/build/grpc-venv}
# Pinned so a test run today and one next month talk to the server with the same client.
packages=("tritonclient[grpc]==2.73.0" "numpy>=1.24" "xxhash>=3" "hpack>=4")
. tools/pip-venv.sh
ensure_pip_venv setup-grpc-venv "$venv" "tritonclient.grpc, numpy, xxhash, hpack" "${packages[@]}"
