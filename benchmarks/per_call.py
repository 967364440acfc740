"""Per-call cost of parity's own Python, on torch's ``fake`` process group.

A ``fake`` group runs every collective as a no-op, so what a call costs is
the Python of each layer: parity's checks, DTensor's wrapper, the group
lookup. One process, rank 0 of a world of 4, mesh ``(4,)`` ``x``; each
figure is the best of 7 blocks of 2,000 calls (the machine is shared; the
best block is the one least disturbed). Baselines:

* ``all_reduce``: ``clone`` + ``dist.all_reduce`` (parity is functional:
  it returns a new array, so the raw call allocates too); with
  ``donate=True``: ``dist.all_reduce`` in place on the same buffer;
* ``all_gather`` / ``reduce_scatter``: ``empty`` output + the
  ``*_single`` collective;
* ``a + b`` inside an open ``jax_semantics()`` scope, and entering the scope
  per call: the same ``a + b`` on plain DTensor.

Run: ``python -m benchmarks.per_call`` (prints JSON rows); the benchmark
runner starts it as a subprocess (the process group is process-wide).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable

WORLD = 4
BLOCKS = 7
CALLS = 2000


def best_per_call(fn: Callable[[], object], calls: int = CALLS, blocks: int = BLOCKS) -> float:
    """Seconds per call of the fastest of ``blocks`` blocks of ``calls`` calls."""
    for _ in range(200):
        fn()
    best = float("inf")
    for _ in range(blocks):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def measure(calls: int = CALLS, blocks: int = BLOCKS) -> list[dict]:
    """``[{"case", "parity_s", "raw_s", "baseline"}, ...]`` on a fresh fake group."""
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import Replicate
    from torch.testing._internal.distributed.fake_pg import FakeStore

    import parity
    from parity import torch_impl as ti
    from parity.torch_impl.torch_compat import dist_all_gather_single, dist_reduce_scatter_single

    dist.init_process_group("fake", rank=0, world_size=WORLD, store=FakeStore())
    try:
        mesh = parity.DeviceMesh((WORLD,), ("x",))
        layout = parity.TensorLayout(("x",), mesh)
        n = 1024
        x = ti.distribute_data_input(torch.ones(n), layout)
        local = x.to_local()
        gathered = n * WORLD
        cases = [
            ("all_reduce, 1,024 f32/rank", lambda: ti.all_reduce(x, "sum", axis_name="x"),
             lambda: dist.all_reduce(local.clone()), "clone + dist.all_reduce"),
            ("all_gather, 1,024 f32/rank", lambda: ti.all_gather(x, 0, "x"),
             lambda: dist_all_gather_single(torch.empty(gathered), local),
             "empty + all_gather_single"),
            ("reduce_scatter, 1,024 f32/rank", lambda: ti.reduce_scatter(x, 0, "x"),
             lambda: dist_reduce_scatter_single(torch.empty(n // WORLD), local),
             "empty + reduce_scatter_single"),
        ]
        holder = [ti.distribute_data_input(torch.ones(n), layout)]

        def donated():
            holder[0] = ti.all_reduce(holder[0], "sum", axis_name="x", donate=True)

        cases.append(("all_reduce donate=True, 1,024 f32/rank", donated,
                          lambda: dist.all_reduce(local), "dist.all_reduce in place"))
        host = np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32)
        a = ti.distribute_tensor(host, parity.TensorLayout(("x", None), mesh))
        b = ti.distribute_tensor(host, parity.TensorLayout(("x", None), mesh))

        def add_scoped():
            with ti.jax_semantics():
                return a + b

        def add_in_scope():  # timed with the scope entered once (below)
            return a + b

        # The op inside one open scope, as in a training step; entering and
        # leaving the scope per call is its own row.
        cases.append(("a + b, (256, 64) over x, inside jax_semantics()", add_in_scope,
                      lambda: a + b, "plain DTensor a + b"))
        cases.append(("a + b, (256, 64) over x, entering jax_semantics() per call", add_scoped,
                      lambda: a + b, "plain DTensor a + b"))
        torch_mesh = ti.to_torch_mesh(mesh)
        cases.append(("DTensor redistribute Shard -> Replicate (context)",
                      lambda: x.redistribute(torch_mesh, [Replicate()]),
                      lambda: dist.all_reduce(local.clone()), "clone + dist.all_reduce"))
        found = []
        with torch.no_grad():
            for case, mine, raw, baseline in cases:
                scope = ti.jax_semantics() if mine is add_in_scope else contextlib.nullcontext()
                with scope:
                    p = best_per_call(mine, calls, blocks)
                r = best_per_call(raw, calls, blocks)
                found.append({"case": case, "parity_s": p, "raw_s": r, "baseline": baseline})
        return found
    finally:
        dist.destroy_process_group()


def rows(calls: int = CALLS) -> list:
    """The figures as benchmark rows, measured in a child process (the fake
    process group is process-wide). Raises when the child fails."""
    import subprocess
    from pathlib import Path

    from benchmarks.common import Row

    proc = subprocess.run([sys.executable, "-m", "benchmarks.per_call", str(calls)],
                          capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[1])
    out = []
    for line in proc.stdout.splitlines():
        data = json.loads(line)
        out.append(Row("per_call", data["case"] + " (fake group, 4 ranks)", data["parity_s"],
                       data["raw_s"], note=f"vs {data['baseline']}; best of {BLOCKS} blocks of "
                       f"{calls} calls; +{(data['parity_s'] - data['raw_s']) * 1e6:.1f} us/call"))
    return out


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else CALLS
    for row in measure(calls):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
