"""Run under torchrun with 4 gloo ranks: a tiny correct job (see
``tests/test_clean_exit.py``); each rank prints ``rank N: ok 24.0``, and,
after parity's exit handlers have run, ``rank N: gloo threads at exit: K``.

The job ends the way that used to abort at shutdown (pytorch#190489): the
mesh's process groups outlive ``destroy_process_group()`` (torch's
``DeviceMesh`` and parity's collective plans hold them), and collectives
are still in their gloo worker threads as the script returns (async
all-reduces on a mesh axis's group, never waited: the worker that finishes
one drops its tensor, which takes the GIL), and an FSDP2 module kept at
module level holds the data axis's group too (as a script's model does).
Measured before the fix in
``parity/torch_impl/runtime/shutdown.py``: 3 of 6 such jobs had a rank die
of SIGABRT, "terminate called without an active exception", in a
``pt_gloo_runloop`` thread; with it, the groups' destructors drain and join
those threads before the interpreter finalizes (K is 0).
"""

from __future__ import annotations

import atexit
import os

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

import parity
from parity import torch_impl as ti

KEPT = []  # what a script keeps at module level until it exits


def gloo_threads() -> int:
    tasks = os.listdir("/proc/self/task")
    names = []
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:  # a thread that ended while we looked
            pass
    return sum(name in ("pt_gloo_runloop", "gloo_tcp_loop") for name in names)


def main() -> None:
    rank = int(os.environ["RANK"])
    # Registered before initialize(): atexit runs last-in first-out, so this
    # reports after parity's exit handlers.
    atexit.register(lambda: print(f"rank {rank}: gloo threads at exit: {gloo_threads()}",
                                  flush=True))
    ti.initialize()
    mesh = parity.DeviceMesh((2, 2), ("data", "model"))
    x = ti.distribute_tensor(np.arange(16.0, dtype=np.float32).reshape(4, 4) / 10,
                             parity.TensorLayout(("data", "model"), mesh))
    with ti.jax_semantics():
        s = (x * 2).sum(0)
    print(f"rank {dist.get_rank()}: ok {float(ti.to_numpy(s).sum()):.1f}", flush=True)
    layer = fully_shard(torch.nn.Linear(4, 4), mesh=x.device_mesh["data"])
    with ti.jax_semantics():
        layer(torch.ones(2, 4)).sum().backward()
    KEPT.append(layer)
    axis_group = x.device_mesh.get_group(0)
    for _ in range(20):
        dist.all_reduce(torch.ones(1 << 16), group=axis_group, async_op=True)


if __name__ == "__main__":
    main()
