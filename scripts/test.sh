#!/usr/bin/env bash
# The README's test command: set up, then run the default pytest suite (every
# test but the groups marked slow, multiprocess or torchtitan; scripts/test_slow.sh runs
# the first two, scripts/torchtitan.sh the last
# (CI runs all three). The tests run in PARITY_TEST_WORKERS processes
# (pytest-xdist, default 2; each test file stays in one process).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m pytest -q -m "not slow and not multiprocess and not torchtitan" \
    -n "${PARITY_TEST_WORKERS:-2}" --dist loadfile "$@"
