#!/usr/bin/env bash
# Create .venv and install parity with every extra, torch pinned by constraints.txt.
# Says what it does: setup takes minutes on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv ($(python3 --version))"
    python3 -m venv .venv
fi
echo "setup: upgrading pip in .venv"
.venv/bin/python -m pip install -q --upgrade pip
echo "setup: installing parity[torch,jax,keras,test] with $(grep -v '^#' constraints.txt | tr '\n' ' ')(constraints.txt)"
.venv/bin/python -m pip install -q -c constraints.txt -e ".[torch,jax,keras,test]"
echo "setup: done in $(( $(date +%s) - start )) s: $(.venv/bin/python -c 'import torch, jax; print("torch", torch.__version__, "jax", jax.__version__)')"
