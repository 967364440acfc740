#!/usr/bin/env bash
# The README's main job: set up, then run the conformance suite on 8 simulated
# devices (JAX reference, raw DTensor, parity) and write reports/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/parity conformance "$@"
