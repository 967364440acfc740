"""A keras-hub model under torchrun (one gloo rank per process): the hub
driver with ``--torchrun``. Each process passes its own rows of every global
batch (``auto_shard_dataset=False``); the test compares every rank with JAX.

    python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/multiprocess/keras_hub_worker.py --configs llama:2x2
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["KERAS_BACKEND"] = "torch"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "keras_support"))

import hub_driver  # noqa: E402

if __name__ == "__main__":
    sys.argv.append("--torchrun")
    hub_driver.main()
