#!/usr/bin/env bash
# Installs what embedrt needs to build, test and benchmark, from Debian packages only.
# Idempotent: packages already present are skipped, so both README commands can call it
# on every run at the cost of one dpkg query.
#
#   ./tools/install-deps.sh             # everything: build, tests, benchmarks (the README's commands)
#   ./tools/install-deps.sh --build     # only what building the library and the CLI needs (container build stage)
#   ./tools/install-deps.sh --runtime   # only the shared libraries the built CLI loads (container run stage)
set -euo pipefail

mode=${1:-all}
build=(
  cmake ninja-build g++ pkg-config
  # libraries the project links
  libxsimd-dev libtbb-dev libxxhash-dev nlohmann-json3-dev libcli11-dev libdeflate-dev libboost-dev
  # gRPC for `embedrt serve --grpc-port`: the library, and protoc + its C++ plugin for the generated code
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
)
runtime=(libtbb12 libdeflate0 libgrpc++1.51 libprotobuf32)
tests=(
  clang libclang-rt-14-dev time
  # tests and benchmarks
  doctest-dev libbenchmark-dev wrk qemu-user
  # PyTorch for parity tests and comparisons (runs as /usr/bin/python3; never needed at run time)
  python3-torch python3-numpy python3-matplotlib python3-xxhash
)
case "$mode" in
  all) packages=("${build[@]}" "${tests[@]}") ;;
  --build) packages=("${build[@]}") ;;
  --runtime) packages=("${runtime[@]}") ;;
  *) echo "install-deps: unknown mode '$mode' (--build, --runtime, or nothing for everything)" >&2; exit 2 ;;
esac

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
[ "$mode" = all ] || exit 0

# Reference writers from PyPI for tests and comparisons, in the default python3 (torch stays on
# Debian's /usr/bin/python3).
if ! python3 -c "import safetensors, numpy" 2>/dev/null; then
  echo "install-deps: installing safetensors and numpy for $(command -v python3)" >&2
  python3 -m pip install --quiet --disable-pip-version-check safetensors numpy
fi
