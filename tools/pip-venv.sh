# Sourced by the setup-*-venv.sh scripts whose venv holds PyPI packages and nothing else: one
# definition of how such a venv is made, checked and reported.
#
# ensure_pip_venv NAME VENV IMPORTS PACKAGE...
#   Makes VENV with python3's venv and pip-installs the PACKAGEs unless its python already runs
#   `import IMPORTS` (so an existing venv is left alone: idempotent), saying so on stderr as NAME;
#   then prints the venv's python on stdout, which is what the callers' callers read.
ensure_pip_venv() {
  local name=$1 venv=$2 imports=$3
  shift 3
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import $imports" 2>/dev/null; then
    echo "$name: installing $* into $venv" >&2
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "$@"
  fi
  echo "$venv/bin/python"
}
