"""A real job of N gloo ranks on this machine, started by the benchmark itself
(``torch.multiprocessing``, spawn), that runs the per-rank benchmark
families: collectives, per-op cost, memory. Rank 0 writes the rows.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from typing import Any

from benchmarks.common import Row


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, port: int, cfg: dict, out_path: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    import torch
    import torch.distributed as dist

    from benchmarks import collectives, memory, ops
    from parity import torch_impl as ti

    torch.set_num_threads(1)
    ti.initialize(timeout_s=cfg.get("pg_timeout_s", 120))
    rows: list[Row] = []
    for family in (collectives, ops, memory):
        if family.__name__.rsplit(".", 1)[1] not in cfg["families"]:
            continue
        started = time.perf_counter()
        try:
            rows.extend(family.on_rank(cfg))
        except Exception as err:  # noqa: BLE001 - one family's failure must not hide the rest
            rows.append(Row(family.__name__.rsplit(".", 1)[1], "(all)",
                            status=f"error: {type(err).__name__}: {err}"[:300]))
        if rank == 0:
            print(f"  {family.__name__}: {time.perf_counter() - started:.1f} s", flush=True)
        dist.barrier()
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump([r.__dict__ for r in rows], f)
    dist.barrier()
    dist.destroy_process_group()


def run(cfg: dict[str, Any]) -> list[Row]:
    """Start ``cfg["world"]`` gloo ranks, run the families in ``cfg["families"]``."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out_path = os.path.join(tmp, "rows.json")
        mp.start_processes(_rank_main, args=(cfg["world"], free_port(), cfg, out_path),
                           nprocs=cfg["world"], start_method="spawn", join=True)
        with open(out_path) as f:
            return [Row(**r) for r in json.load(f)]
