"""Donated ``all_reduce`` against the in-place raw call on 2 gloo ranks.

``python -m benchmarks.donation``: for 4 MB and 64 MB per rank, parity's
``all_reduce(x, donate=True)`` (each result is the next call's input) and
``dist.all_reduce(buf)`` in place alternate, each sample after a barrier;
prints the median of each (slowest rank) and their ratio. Both reduce one
buffer in place, so the ratio is parity's own cost at that size.
"""

from __future__ import annotations

import os
import statistics
import time

import torch.multiprocessing as mp

from benchmarks.gloo_job import free_port

SIZES = (4 << 20, 64 << 20)


def _rank_main(rank: int, world: int, port: int, size: int, samples: int) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    import torch
    import torch.distributed as dist

    import parity
    from parity import torch_impl as ti

    torch.set_num_threads(1)
    ti.initialize()
    layout = parity.TensorLayout(("x",), parity.DeviceMesh((world,), ("x",)))
    n = size // 4
    donor = [ti.distribute_data_input(torch.zeros(n), layout)]
    buf = torch.zeros(n)

    def parity_call() -> None:
        donor[0] = ti.all_reduce(donor[0], "sum", axis_name="x", donate=True)

    def raw_call() -> None:
        dist.all_reduce(buf)

    mine, raw = [], []
    parity_call(), raw_call()  # warm-up
    for _ in range(samples):
        for fn, acc in ((parity_call, mine), (raw_call, raw)):
            dist.barrier()
            start = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - start)
    t = torch.tensor([statistics.median(mine), statistics.median(raw)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(f"all_reduce {size >> 20} MB/rank x{world} gloo: donate=True {t[0] * 1e3:.1f} ms, "
              f"raw in place {t[1] * 1e3:.1f} ms, ratio {t[0] / t[1]:.3f} "
              f"(median of {samples})", flush=True)
    dist.destroy_process_group()


def main(world: int = 2) -> None:
    for size in SIZES:
        samples = 15 if size > (16 << 20) else 41
        mp.start_processes(_rank_main, args=(world, free_port(), size, samples), nprocs=world,
                           start_method="spawn", join=True)


if __name__ == "__main__":
    main()
