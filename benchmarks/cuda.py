"""The same figures on CUDA, when there is a GPU: NCCL collectives over one
rank per GPU when there are several, the memory figure on simulated ranks
on one GPU, and conformance throughput on ``--device cuda``. Without CUDA:
one row that says so.
"""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks.common import Row


def run(cfg: dict, quick: bool) -> list[Row]:
    import torch

    if not torch.cuda.is_available():
        return [Row("cuda", "(all)", status="skipped: torch.cuda.is_available() is False")]
    rows: list[Row] = []
    count = torch.cuda.device_count()
    if count >= 2:
        from benchmarks import gloo_job

        world = min(count, cfg["world"])
        try:  # initialize() picks NCCL when CUDA is visible
            rows += gloo_job.run(dict(cfg, world=world, families=["collectives"]))
        except Exception as err:  # noqa: BLE001
            rows.append(Row("cuda", "nccl collectives", status=f"error: {err}"[:300]))
    else:
        rows.append(Row("cuda", "nccl collectives",
                        status="not available: one GPU (NCCL needs a GPU per rank)"))
    rows += _memory(cfg)
    if not quick:
        rows += _conformance(cfg)
    for r in rows:
        r.family = "cuda " + r.family if not r.family.startswith("cuda") else r.family
    return rows


def _memory(cfg: dict) -> list[Row]:
    import numpy as np

    import parity
    from benchmarks.memory import GOAL, SHAPE, _shares, _storage_bytes
    from parity import torch_impl as ti

    host = np.ones(SHAPE, np.float32)
    try:
        with ti.simulate(8, device="cuda"):
            mesh = parity.DeviceMesh((2, 4), ("data", "model"))
            layout = parity.TensorLayout(("data", "model"), mesh)
            v = ti.distribute_variable(host, layout)
            largest = max(_storage_bytes(ti.local_block(v, i)) for i in range(8))
    except Exception as err:  # noqa: BLE001
        return [Row("memory", "simulated on cuda", status=f"error: {err}"[:300])]
    return [Row("memory", f"variable {SHAPE} ('data','model') on 8 simulated ranks, 1 GPU",
                largest, host.nbytes / _shares(layout), unit="B", goal=GOAL)]


def _conformance(cfg: dict) -> list[Row]:
    import tempfile

    from conformance.cases import default_cases
    from conformance.running.runner import run_cases

    subset = list(default_cases())[: cfg["conformance_cases"]]
    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        for column, raw in (("torch-raw", True), ("torch", False)):
            started = time.perf_counter()
            try:
                run_cases(subset, "torch", Path(tmp) / f"{column}.json", raw=raw, device="cuda",
                          progress=False)
            except Exception as err:  # noqa: BLE001
                return [Row("conformance", f"{column} on cuda", status=f"error: {err}"[:300])]
            rates[column] = len(subset) / (time.perf_counter() - started)
    return [Row("conformance", f"torch on cuda: {len(subset)} cases ({rates['torch']:.1f} cases/s)",
                1 / rates["torch"], 1 / rates["torch-raw"], note="seconds per case vs raw DTensor")]
