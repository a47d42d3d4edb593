#!/usr/bin/env bash
# Makes the Python environment that validates tools/deploy/ offline (tests/deploy/): the KServe
# SDK (its generated models of ServingRuntime and InferenceService) and kubernetes-validate (the
# Kubernetes JSON schemas, bundled). Idempotent; prints the venv's python.
#
#   ./tools/setup-deploy-venv.sh          # creates build/deploy-venv (or $EMBEDRT_DEPLOY_VENV)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${EMBEDRT_DEPLOY_VENV:-$PWD/build/deploy-venv}
packages=("kserve==0.21.0" "kubernetes-validate==1.37.0" "pyyaml>=6")
. tools/pip-venv.sh
ensure_pip_venv setup-deploy-venv "$venv" "kserve, kubernetes_validate, yaml" "${packages[@]}"
