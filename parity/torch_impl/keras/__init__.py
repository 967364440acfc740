"""Keras 3's torch backend made distributed by parity: the pieces that
``keras/src/backend/jax/`` has and ``keras/src/backend/torch/`` lacks, one
module each.

* ``install`` -- ``install_keras()`` / ``uninstall_keras()``: points Keras at
  the modules below and patches its torch classes (all or nothing).
* ``distribution_lib`` -- the backend ``distribution_lib`` (as
  ``keras/src/backend/jax/distribution_lib.py``).
* ``variables`` -- DTensor-backed Keras variables (as ``JaxVariable``).
* ``trainer`` -- batches laid out per step (as ``jax/trainer.py``'s
  ``_distribute_data``).

Importing this package imports neither Keras nor torch's Keras backend;
``install_keras()`` does.
"""
