#!/usr/bin/env bash
# Installs what embedrt needs to build, test and benchmark, from Debian packages only.
# Idempotent: packages already present are skipped, so both README commands can call it
# on every run at the cost of one dpkg query.
set -euo pipefail

packages=(
  # build
  cmake ninja-build g++ clang libclang-rt-14-dev pkg-config time
  # libraries the project links
  libxsimd-dev libtbb-dev libxxhash-dev nlohmann-json3-dev libcli11-dev libdeflate-dev libboost-dev
  # gRPC for `embedrt serve --grpc-port`: the library, and protoc + its C++ plugin for the generated code
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  # tests and benchmarks
  doctest-dev libbenchmark-dev wrk qemu-user
  # PyTorch for parity tests and comparisons (runs as /usr/bin/python3; never needed at run time)
  python3-torch python3-numpy python3-matplotlib python3-xxhash
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Reference writers from PyPI for tests and comparisons, in the default python3 (torch stays on
# Debian's /usr/bin/python3).
if ! python3 -c "import safetensors, numpy" 2>/dev/null; then
  echo "install-deps: installing safetensors and numpy for $(command -v python3)" >&2
  python3 -m pip install --quiet --disable-pip-version-check safetensors numpy
fi
