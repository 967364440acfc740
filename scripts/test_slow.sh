#!/usr/bin/env bash
# The slower test groups (markers slow and multiprocess: torchrun ranks,
# torch.compile of whole steps, conformance end to end), after
# scripts/test.sh has set up .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest -q -m "(slow or multiprocess) and not torchtitan" "$@"
