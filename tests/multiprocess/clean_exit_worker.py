"""Run under torchrun with 4 gloo ranks: a tiny correct job (see
``tests/test_clean_exit.py``); each rank prints ``rank N: ok 24.0``."""

from __future__ import annotations

import numpy as np
import torch.distributed as dist

import parity
from parity import torch_impl as ti


def main() -> None:
    ti.initialize()
    mesh = parity.DeviceMesh((2, 2), ("data", "model"))
    x = ti.distribute_tensor(np.arange(16.0, dtype=np.float32).reshape(4, 4) / 10,
                             parity.TensorLayout(("data", "model"), mesh))
    with ti.jax_semantics():
        s = (x * 2).sum(0)
    print(f"rank {dist.get_rank()}: ok {float(ti.to_numpy(s).sum()):.1f}", flush=True)


if __name__ == "__main__":
    main()
