#!/usr/bin/env bash
# torchtitan 0.3.0's llama3 debug model under jax_semantics() on 4 gloo ranks
# (marker `torchtitan`, tests/test_torchtitan.py). Run after scripts/setup.sh:
#   bash scripts/torchtitan.sh                  # install if missing, then test
#   bash scripts/torchtitan.sh -k fsdp_tp -s    # extra arguments go to pytest
#
# torchtitan requires datasets, tensorboard, wandb, torchdata and more for its
# trainer's data, logging and checkpointing; the model, parallelize, loss and
# optimizer path imports only spmd_types and tyro. So torchtitan goes into
# .venv without its dependencies, then those two with constraints.txt (torch
# stays .venv's pinned CPU build). triton, which torchtitan imports on CPU
# too, is an import-only stub in tests/torchtitan_support, not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCHTITAN=${TORCHTITAN:-torchtitan==0.3.0}
[ -x .venv/bin/python ] || bash scripts/setup.sh
installed=$(.venv/bin/python -c 'import importlib.metadata as m; print("torchtitan==" + m.version("torchtitan"))' 2>/dev/null || true)
if [ "$installed" != "$TORCHTITAN" ] || ! .venv/bin/python -c 'import spmd_types, tyro' 2>/dev/null; then
    echo "torchtitan: installing $TORCHTITAN into .venv without its dependencies, then spmd_types and tyro"
    .venv/bin/python -m pip install -q --no-deps "$TORCHTITAN"
    .venv/bin/python -m pip install -q -c constraints.txt "spmd_types==0.2.3" tyro
fi
.venv/bin/python -c "import torchtitan, torch; print('torchtitan', torchtitan.__version__, '| torch', torch.__version__)"
start=$(date +%s)
.venv/bin/python -m pytest -q -m torchtitan -p no:cacheprovider tests/test_torchtitan.py "$@"
echo "torchtitan: tests took $(( $(date +%s) - start )) s"
