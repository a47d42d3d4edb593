#!/usr/bin/env bash
# Builds the Python package embedrt from this checkout (pyproject.toml: scikit-build-core and
# nanobind, the project's own CMake build) and installs it into a venv with what its tests need.
# Idempotent: the CMake build is kept in build/python/, so a second run recompiles only what changed.
#
#   ./tools/setup-python-venv.sh               # build/python-venv (or $EMBEDRT_PYTHON_VENV)
#   ./tools/setup-python-venv.sh --also DIR    # and into the venv DIR as well (tools/test.sh puts
#                                              # it into the torch + transformers venv this way)
#
# The wheel is built without build isolation (scikit-build-core and nanobind come from PyPI into
# the venv) so that the kept CMake build stays valid between runs; a plain `pip install .` builds
# the same package from scratch in an isolated environment.
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/install-deps.sh

also=()
while [ $# -gt 0 ]; do
  case "$1" in
    --also) also+=("$2"); shift 2 ;;
    *) echo "setup-python-venv: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

venv=${EMBEDRT_PYTHON_VENV:-$PWD/build/python-venv}
pip_quiet=(-q --disable-pip-version-check)
test_packages=(pytest numpy ml_dtypes xxhash safetensors)
ensure_packages() {  # ensure_packages VENV MODULES... -- PACKAGES...
  local venv=$1
  shift
  local modules=()
  while [ "$1" != -- ]; do modules+=("$1"); shift; done
  shift
  if ! "$venv/bin/python" -c "import $(IFS=,; echo "${modules[*]}")" 2>/dev/null; then
    echo "setup-python-venv: installing $* into $venv" >&2
    "$venv/bin/pip" install "${pip_quiet[@]}" "$@"
  fi
}

if [ ! -x "$venv/bin/python" ]; then
  echo "setup-python-venv: creating $venv" >&2
  python3 -m venv "$venv"
fi
ensure_packages "$venv" pytest numpy ml_dtypes xxhash safetensors scikit_build_core nanobind -- \
  "${test_packages[@]}" "scikit-build-core>=0.11" "nanobind>=2.9,<4"

# One wheel for every venv: the package is compiled once. Warnings are errors here, as in the
# Release build of tools/test.sh (a user's `pip install .` keeps them warnings).
dist=build/python/dist
rm -rf "$dist"
echo "setup-python-venv: building the embedrt wheel (build/python/ keeps the CMake build)" >&2
"$venv/bin/pip" wheel "${pip_quiet[@]}" --no-deps --no-build-isolation -w "$dist" \
  --config-settings=build-dir=build/python/{wheel_tag} --config-settings=cmake.define.EMBEDRT_WERROR=ON .
wheel=$(ls "$dist"/embedrt-*.whl)

for target in "$venv" "${also[@]}"; do
  ensure_packages "$target" pytest numpy ml_dtypes xxhash safetensors -- "${test_packages[@]}"
  "$target/bin/pip" install "${pip_quiet[@]}" --force-reinstall --no-deps "$wheel"
  "$target/bin/python" -c "import embedrt; print('setup-python-venv: embedrt', embedrt.__version__, 'in', '$target')" >&2
done
