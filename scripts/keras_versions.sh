#!/usr/bin/env bash
# The Keras tests on the next Keras: the pinned keras-nightly is installed
# (no dependencies: they are keras 3.15.1's, already in .venv) into
# .keras-next/, which PYTHONPATH puts ahead of .venv's keras; torch and jax
# stay .venv's. Run after scripts/setup.sh:
#   bash scripts/keras_versions.sh                 # install if missing, then test
#   KERAS_NEXT=keras-nightly==X bash scripts/keras_versions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
KERAS_NEXT=${KERAS_NEXT:-keras-nightly==3.16.0.dev2026102704}
OVERLAY=.keras-next
if [ ! -f "$OVERLAY/.installed" ] || [ "$(cat "$OVERLAY/.installed")" != "$KERAS_NEXT" ]; then
    rm -rf "$OVERLAY"
    echo "keras_versions: installing $KERAS_NEXT into $OVERLAY"
    .venv/bin/python -m pip install -q --no-deps --target "$OVERLAY" "$KERAS_NEXT"
    echo "$KERAS_NEXT" > "$OVERLAY/.installed"
fi
export PYTHONPATH="$PWD/$OVERLAY${PYTHONPATH:+:$PYTHONPATH}"
# The drivers the tests start check that they import this Keras, not .venv's.
export PARITY_EXPECT_KERAS="${KERAS_NEXT#*==}"
KERAS_BACKEND=torch .venv/bin/python -c "import keras, torch; print('keras', keras.version(), 'from', keras.__file__, '| torch', torch.__version__)"
.venv/bin/python -m pytest -q --timeout 900 -p no:cacheprovider \
    tests/test_keras_install.py tests/test_keras_torch.py tests/test_keras_own_torch.py \
    tests/test_keras_parity.py "$@"
