"""A rank that dies or hangs mid-run; the others must stop naming it.

Started by tests/test_faults.py as plain processes (``initialize()`` from
torchrun-style environment variables, no elastic agent to tear them down).
``argv[1]`` is the mode: ``kill`` (the victim SIGKILLs itself), ``error``
(the victim raises), ``stuck`` (the victim sleeps outside any collective);
``argv[2]`` the victim rank. Every rank prints ``rank R: started`` once the
process group is up, then runs all_reduce in a loop.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

import parity
from parity import torch_impl as ti


def main() -> None:
    mode, victim = sys.argv[1], int(sys.argv[2])
    ti.initialize(timeout_s=float(os.environ.get("FAULT_PG_TIMEOUT_S", "300")))
    rank = ti.process_id()
    mesh = parity.DeviceMesh((ti.num_processes(),), ("x",))
    x = ti.distribute_tensor(np.ones((ti.num_processes() * 256,), np.float32),
                             parity.TensorLayout(("x",), mesh))
    print(f"rank {rank}: started", flush=True)
    t0 = time.monotonic()
    while True:
        ti.all_reduce(x, "sum", axis_name="x")
        if rank == victim and time.monotonic() - t0 > 1.0:
            print(f"rank {rank}: going down ({mode}) at {time.time():.3f}", flush=True)
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif mode == "error":
                raise RuntimeError("the victim's own bug")
            elif mode == "stuck":
                time.sleep(3600)


if __name__ == "__main__":
    main()
