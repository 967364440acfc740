#!/usr/bin/env bash
# Create .venv and install parity with every extra, torch pinned by constraints.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -c constraints.txt -e ".[torch,jax,keras,test]"
