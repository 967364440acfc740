"""Keras on torch under torchrun (one gloo rank per process, 4 ranks): the
parity driver with ``--torchrun``. Each process passes its own rows of every
global batch (``auto_shard_dataset=False``) and prints its result; the test
compares them with JAX on 4 devices.

    python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/multiprocess/keras_parity_worker.py --configs mlp:dp
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["KERAS_BACKEND"] = "torch"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "keras_support"))

import parity_driver  # noqa: E402

if __name__ == "__main__":
    sys.argv.append("--torchrun")
    parity_driver.main()
