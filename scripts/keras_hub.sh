#!/usr/bin/env bash
# keras-hub's published models on torch + parity against JAX (marker
# `keras_hub`, tests/test_keras_hub.py). Run after scripts/setup.sh:
#   bash scripts/keras_hub.sh                      # install if missing, then test
#   bash scripts/keras_hub.sh -k 2x4               # extra arguments go to pytest
#   bash scripts/keras_hub.sh -m keras_hub -k trains_every_family   # issue 27's matrix
#
# keras-hub requires tensorflow-text, which pulls TensorFlow (~3.5 GB), but
# its backbones are Keras layers: TensorFlow serves only keras-hub's tf.data
# preprocessing, which these tests do not use. So keras-hub goes into the
# .keras-hub overlay (ahead of .venv on PYTHONPATH) without its dependencies,
# with the small packages its import and its data input need (regex,
# tokenizers, sentencepiece, kagglehub, and grain, the pure-Python loader
# keras-hub uses when TensorFlow is absent); a package .venv already has is held at .venv's version. torch,
# jax and keras stay .venv's.
set -euo pipefail
cd "$(dirname "$0")/.."
KERAS_HUB=${KERAS_HUB:-keras-hub==0.32.0}
OVERLAY=.keras-hub
if [ ! -f "$OVERLAY/.installed" ] || [ "$(cat "$OVERLAY/.installed")" != "$KERAS_HUB" ]; then
    rm -rf "$OVERLAY"
    echo "keras_hub: installing $KERAS_HUB into $OVERLAY (no TensorFlow)"
    held=$(mktemp)
    .venv/bin/python -m pip freeze --exclude-editable | grep -E '^[A-Za-z0-9_.-]+==' > "$held"
    .venv/bin/python -m pip install -q --no-deps --target "$OVERLAY" "$KERAS_HUB"
    .venv/bin/python -m pip install -q --target "$OVERLAY" -c "$held" \
        regex tokenizers sentencepiece kagglehub grain
    rm -f "$held"
    echo "$KERAS_HUB" > "$OVERLAY/.installed"
fi
export PYTHONPATH="$PWD/$OVERLAY${PYTHONPATH:+:$PYTHONPATH}"
KERAS_BACKEND=torch .venv/bin/python -c "import keras_hub, keras, torch, jax; print('keras-hub', keras_hub.__version__, '| keras', keras.version(), '| torch', torch.__version__, '| jax', jax.__version__)"
start=$(date +%s)
# The full family matrix (marker keras_hub_matrix) is opt-in: a later -m keras_hub
# replaces this one: bash scripts/keras_hub.sh -m keras_hub -k trains_every_family
.venv/bin/python -m pytest -q -m "keras_hub and not keras_hub_matrix" -p no:cacheprovider \
    tests/test_keras_hub.py tests/test_keras_layout.py tests/test_keras_hub_matrix.py "$@"
echo "keras_hub: tests took $(( $(date +%s) - start )) s"
