"""Donating collectives against the raw calls that reuse their buffers, on
2 gloo ranks.

``python -m benchmarks.donation``: for 4 MB and 64 MB per rank,

* ``all_reduce(x, donate=True)`` (each result is the next call's input)
  against ``dist.all_reduce(buf)`` in place;
* ``all_gather(x, 0, donate=True)`` and ``reduce_scatter(y, 0,
  donate=True)`` in turn (each result the next call's input: the gather
  writes into the scatter's donated block and back, see
  ``parity.torch_impl.collectives.donation``) against ``all_gather_single`` /
  ``reduce_scatter_single`` into outputs allocated once, outside the timer,
  each raw output the other raw call's input as in parity's pair (the raw
  scatter once read a buffer nothing wrote, and came out 1.17-1.21x
  faster than parity's at 64 MB in three runs).

parity and raw samples alternate with a second sample of the raw call,
each after a barrier, the three rotating their order from round to round
(whichever runs first after the previous collective may pay for what that
one left behind); each figure is the median of its samples on the
slowest rank, and the ratio is parity / raw in the same run. The noise
floor is the second raw sample over the first (the same call twice: any
distance from 1.000x is the machine's). The block of the size named is
the all_gather's input and the reduce_scatter's output (its input is
world times larger).

Each line also gives the median CPU time per call of the whole process
(``time.process_time``: gloo's threads included; time spent waiting for
a core on a loaded machine is not in it, so it tells the work a call does
from the load around it) and the median minor page faults per call: a call that allocates and first-touches
a new output shows it there (parity's donated reduce_scatter once did,
+16,384 faults per 64 MB call, see ``parity.torch_impl.collectives.donation``). gloo
itself allocates per call: its all_gather gathers into a temporary and
copies, its reduce_scatter reduces a clone of its input, on both sides.
The load average (``os.getloadavg``) is printed before and after.
"""

from __future__ import annotations

import os
import resource
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
    from parity.torch_impl.runtime.torch_compat import dist_all_gather_single, dist_reduce_scatter_single

    torch.set_num_threads(1)
    ti.initialize()
    layout = parity.TensorLayout(("x",), parity.DeviceMesh((world,), ("x",)))
    n = size // 4
    reduced = [ti.distribute_data_input(torch.zeros(n), layout)]
    # A block on its own storage (a collective's output), so the loop can keep it.
    turn = [ti.all_gather(ti.distribute_data_input(torch.zeros(n // world), layout), 0, "x")]
    gathered = [None]
    buf, gather_out, scatter_out = torch.zeros(n), torch.zeros(n * world), torch.zeros(n)

    def p_all_reduce() -> None:
        reduced[0] = ti.all_reduce(reduced[0], "sum", axis_name="x", donate=True)

    def p_all_gather() -> None:
        gathered[0] = ti.all_gather(turn[0], 0, "x", donate=True)

    def p_reduce_scatter() -> None:
        turn[0] = ti.reduce_scatter(gathered[0], 0, "x", donate=True)

    pairs = [
        ("all_reduce", p_all_reduce, lambda: dist.all_reduce(buf), "dist.all_reduce in place"),
        # As parity's pair: each raw output is the other raw call's input.
        ("all_gather", p_all_gather, lambda: dist_all_gather_single(gather_out, scatter_out),
         "all_gather_single into a preallocated output"),
        ("reduce_scatter", p_reduce_scatter,
         lambda: dist_reduce_scatter_single(scatter_out, gather_out),
         "reduce_scatter_single into a preallocated output"),
    ]
    times = {name: ([], [], []) for name, *_ in pairs}
    cpu = {name: ([], [], []) for name, *_ in pairs}
    faults = {name: ([], [], []) for name, *_ in pairs}
    for round_ in range(samples + 1):  # round 0: warm-up, dropped
        for name, mine, raw, _ in pairs:
            calls = [(mine, 0), (raw, 1), (raw, 2)]
            shift = round_ % 3  # each of the three takes each place in turn
            for fn, k in calls[shift:] + calls[:shift]:
                dist.barrier()
                before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                cpu_start = time.process_time()
                start = time.perf_counter()
                fn()
                elapsed = time.perf_counter() - start
                cpu_used = time.process_time() - cpu_start
                if round_:
                    times[name][k].append(elapsed)
                    cpu[name][k].append(cpu_used)
                    faults[name][k].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                                           - before)
    medians = [statistics.median(v) for name, *_ in pairs for v in times[name]]
    medians += [statistics.median(v) for name, *_ in pairs for v in faults[name]]
    medians += [statistics.median(v) for name, *_ in pairs for v in cpu[name]]
    t = torch.tensor(medians, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        f0 = 3 * len(pairs)
        for i, (name, _, _, baseline) in enumerate(pairs):
            mine, raw, again = (t[3 * i + k].item() for k in range(3))
            pf_mine, pf_raw = t[f0 + 3 * i].item(), t[f0 + 3 * i + 1].item()
            cpu_mine, cpu_raw = t[2 * f0 + 3 * i].item(), t[2 * f0 + 3 * i + 1].item()
            print(f"{name} donate=True, {size >> 20} MB/rank x{world} gloo: parity {mine * 1e3:.2f} ms, "
                  f"raw {raw * 1e3:.2f} ms ({baseline}), ratio {mine / raw:.3f} "
                  f"(median of {samples}; noise floor: raw again / raw {again / raw:.3f}; "
                  f"CPU per call: parity {cpu_mine * 1e3:.2f} ms, raw {cpu_raw * 1e3:.2f} ms; "
                  f"page faults per call: parity {pf_mine:.0f}, raw {pf_raw:.0f})",
                  flush=True)
    dist.destroy_process_group()


def main(world: int = 2, scale: int = 1) -> None:
    """``scale``: samples per size times this (``python -m benchmarks.donation 3``)."""
    print("load average before: %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    for size in SIZES:
        samples = (15 if size > (16 << 20) else 41) * scale
        mp.start_processes(_rank_main, args=(world, free_port(), size, samples), nprocs=world,
                           start_method="spawn", join=True)
    print("load average after: %.2f %.2f %.2f" % os.getloadavg(), flush=True)


if __name__ == "__main__":
    import sys

    main(scale=int(sys.argv[1]) if len(sys.argv) > 1 else 1)
