#!/usr/bin/env bash
# The README's test command: set up, then run the pytest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m pytest -q "$@"
