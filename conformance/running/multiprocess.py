"""``parity run --backend torch`` under ``torchrun``: one rank per process
(gloo on CPU, NCCL with one GPU per rank), every rank runs every case in
lockstep, rank 0 writes the report. Cases whose mesh needs another number of
devices than the world size are left out (``parity compare`` shows them as
``missing``). No per-case watchdog here: a rank that hangs is ended by the
process group's timeout (``torch_impl.initialize``).
"""

from __future__ import annotations

import sys
import time

from conformance.reports.report import ReportWriter, make_header
from conformance.running.runner import case_fields


def run_under_torchrun(cases, args) -> int:
    import torch

    from conformance.running.run_torch import TorchRunner  # imports torch
    from parity import torch_impl

    torch_impl.initialize()
    world, rank = torch_impl.num_processes(), torch_impl.process_id()
    device = torch_impl.torch_device().type
    runner = TorchRunner(world, device=device, raw=args.raw)
    column = "torch-raw" if args.raw else "torch"
    semantics = "raw-dtensor" if args.raw else "jax_semantics"
    writer = None
    if rank == 0:
        header = make_header("torch", column, device, "multiprocess", world_size=world,
                             semantics=semantics, timeout_s=None)
        header["versions"]["torch"] = torch.__version__
        writer = ReportWriter(args.out, header)
    selected = [c for c in cases if c.devices == world]
    started = time.monotonic()
    try:
        for case in selected:
            entry = runner.run(case.to_json())
            if writer is not None:
                writer.add({**case_fields(case), **entry})
    finally:
        if writer is not None:
            writer.close(seconds=round(time.monotonic() - started, 2),
                         skipped=len(cases) - len(selected))
    if rank == 0:
        print(f"{len(selected)} cases on {world} ranks ({len(cases) - len(selected)} need another "
              f"device count) -> {args.out}", file=sys.stderr)
    return 0
