#!/usr/bin/env bash
# Create .venv-keras-next: parity on the pinned keras-nightly (the next Keras,
# whose torch backend has its own distribution_lib), torch and jax as in .venv.
# Then run the Keras tests there:
#   scripts/keras_versions.sh            # create the venv (if missing) and test
#   VENV=... KERAS_NEXT=keras-nightly==X scripts/keras_versions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-keras-next}
KERAS_NEXT=${KERAS_NEXT:-keras-nightly==3.16.0.dev2026102704}
if [ ! -x "$VENV/bin/python" ]; then
    start=$(date +%s)
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -c constraints.txt -e ".[torch,jax,test]" \
        "jax==0.10.2" "$KERAS_NEXT"
    echo "$VENV ready in $(( $(date +%s) - start )) s"
fi
"$VENV/bin/python" -c "import keras, torch; print('keras', keras.version(), 'torch', torch.__version__)"
"$VENV/bin/python" -m pytest -q --timeout 900 -p no:cacheprovider \
    tests/test_keras_install.py tests/test_keras_torch.py tests/test_keras_parity.py \
    tests/test_keras_compare.py "$@"
