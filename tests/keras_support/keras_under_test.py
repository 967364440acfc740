"""The Keras a driver imported is the one the run says it tests:
``scripts/keras_versions.sh`` sets ``PARITY_EXPECT_KERAS`` to the pinned
keras-nightly version, and a driver that found another Keras (a lost
``PYTHONPATH``) stops with both versions named instead of passing on the
wrong one."""

from __future__ import annotations

import os


def assert_keras_under_test() -> None:
    import keras

    expected = os.environ.get("PARITY_EXPECT_KERAS")
    if expected and keras.version() != expected:
        raise SystemExit(f"keras {keras.version()} from {keras.__file__} was imported, "
                         f"but this run tests keras {expected} (PARITY_EXPECT_KERAS): "
                         "is the overlay still on PYTHONPATH?")
