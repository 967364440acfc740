#!/usr/bin/env bash
# Create .venv-hub: parity with every extra plus keras-hub 0.32.0 (which pulls
# TensorFlow, hence a venv of its own). torch stays the pinned CPU build
# (constraints.txt), keras and jax the versions of .venv.
# Used by the `keras_hub` test group:
#   .venv-hub/bin/python -m pytest -m keras_hub tests/test_keras_hub.py
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-hub}
start=$(date +%s)
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -c constraints.txt -e ".[torch,jax,keras,test]" \
    "keras==3.15.1" "jax==0.10.2" "keras-hub==0.32.0"
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
torch = md.version("torch")
assert torch.startswith("2.13.0") and "cu" not in torch, f"torch {torch}: expected the 2.13.0 CPU build"
print("torch", torch, "keras", md.version("keras"), "keras-hub", md.version("keras-hub"),
      "jax", md.version("jax"))
PY
echo "$VENV ready in $(( $(date +%s) - start )) s"
