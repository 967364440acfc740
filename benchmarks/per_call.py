"""Per-call cost of parity's own Python, on torch's ``fake`` process group.

A ``fake`` group runs every collective as a no-op, so what a call costs is
the Python of each layer: parity's checks, DTensor's wrapper, the group
lookup. One process, rank 0 of a world of 4, mesh ``(4,)`` ``x``; each
figure is the best of 7 blocks of 2,000 calls, timed in this thread's CPU
time (``time.thread_time``: nothing here waits, and on a shared machine CPU
time leaves out the time other processes hold the core), parity's and the
raw call's blocks alternating. Baselines:

* ``all_reduce``: ``clone`` + ``dist.all_reduce`` (parity is functional:
  it returns a new array, so the raw call allocates too); with
  ``donate=True``: ``dist.all_reduce`` in place on the same buffer;
* ``all_gather`` / ``reduce_scatter``: ``empty`` output + the
  ``*_single`` collective; with ``donate=True`` (a gather and a scatter in
  turn, each result the next one's input): the two ``*_single`` calls into
  outputs allocated once;
* ``a + b`` inside an open ``jax_semantics()`` scope, and entering the scope
  per call: the same ``a + b`` on plain DTensor; for context, the same
  ``a + b`` under a ``TorchFunctionMode`` that only calls the function (the
  floor of any Python mode).

Run: ``python -m benchmarks.per_call`` (prints JSON rows); the benchmark
runner starts it as a subprocess (the process group is process-wide).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable
from typing import Any

WORLD = 4
BLOCKS = 7
CALLS = 2000


def _block(fn: Callable[[], object], calls: int) -> float:
    start = time.thread_time()
    for _ in range(calls):
        fn()
    return (time.thread_time() - start) / calls


def best_pair(mine: Callable[[], object], raw: Callable[[], object], calls: int = CALLS,
              blocks: int = BLOCKS, scope: Callable[[], Any] = contextlib.nullcontext
              ) -> tuple[float, float]:
    """CPU seconds per call of the fastest of ``blocks`` blocks of ``calls``
    calls of each, their blocks alternating; ``scope`` is entered around
    ``mine``'s blocks, outside the timer."""
    with scope():
        _block(mine, 200)
    _block(raw, 200)
    best = [float("inf"), float("inf")]
    for _ in range(blocks):
        with scope():
            best[0] = min(best[0], _block(mine, calls))
        best[1] = min(best[1], _block(raw, calls))
    return best[0], best[1]


def measure(calls: int = CALLS, blocks: int = BLOCKS) -> list[dict]:
    """``[{"case", "parity_s", "raw_s", "baseline"}, ...]`` on a fresh fake group."""
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import Replicate
    from torch.overrides import TorchFunctionMode
    from torch.testing._internal.distributed.fake_pg import FakeStore

    import parity
    from parity import torch_impl as ti
    from parity.torch_impl.runtime.torch_compat import dist_all_gather_single, dist_reduce_scatter_single

    class CallOnly(TorchFunctionMode):
        """The floor of a Python function mode: it only calls the function."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    dist.init_process_group("fake", rank=0, world_size=WORLD, store=FakeStore())
    try:
        mesh = parity.DeviceMesh((WORLD,), ("x",))
        layout = parity.TensorLayout(("x",), mesh)
        n = 1024
        x = ti.distribute_data_input(torch.ones(n), layout)
        local = x.to_local()
        gathered = n * WORLD
        gather_out, back_out = torch.empty(gathered), torch.empty(n)
        cases = [
            ("all_reduce, 1,024 f32/rank", lambda: ti.all_reduce(x, "sum", axis_name="x"),
             lambda: dist.all_reduce(local.clone()), "clone + dist.all_reduce", None),
            ("all_gather, 1,024 f32/rank", lambda: ti.all_gather(x, 0, "x"),
             lambda: dist_all_gather_single(torch.empty(gathered), local),
             "empty + all_gather_single", None),
            ("reduce_scatter, 1,024 f32/rank", lambda: ti.reduce_scatter(x, 0, "x"),
             lambda: dist_reduce_scatter_single(torch.empty(n // WORLD), local),
             "empty + reduce_scatter_single", None),
        ]
        holder = [ti.distribute_data_input(torch.ones(n), layout)]

        def donated():
            holder[0] = ti.all_reduce(holder[0], "sum", axis_name="x", donate=True)

        cases.append(("all_reduce donate=True, 1,024 f32/rank", donated,
                      lambda: dist.all_reduce(local), "dist.all_reduce in place", None))
        turn = [ti.all_gather(ti.distribute_data_input(torch.ones(n // WORLD), layout), 0, "x")]

        def gather_then_scatter():
            turn[0] = ti.reduce_scatter(ti.all_gather(turn[0], 0, "x", donate=True), 0, "x",
                                        donate=True)

        def raw_gather_then_scatter():
            dist_all_gather_single(gather_out, local)
            dist_reduce_scatter_single(back_out, gather_out)

        cases.append(("all_gather + reduce_scatter donate=True, 1,024 f32/rank",
                      gather_then_scatter, raw_gather_then_scatter,
                      "the two *_single calls into outputs allocated once", None))
        host = np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32)
        a = ti.distribute_tensor(host, parity.TensorLayout(("x", None), mesh))
        b = ti.distribute_tensor(host, parity.TensorLayout(("x", None), mesh))

        def add_scoped():
            with ti.jax_semantics():
                return a + b

        def add():
            return a + b

        # The op inside one open scope, as in a training step; entering and
        # leaving the scope per call is its own row.
        cases.append(("a + b, (256, 64) over x, inside jax_semantics()", add, add,
                      "plain DTensor a + b", ti.jax_semantics))
        cases.append(("a + b, (256, 64) over x, entering jax_semantics() per call", add_scoped,
                      add, "plain DTensor a + b", None))
        cases.append(("a + b under a TorchFunctionMode that only calls the op (context)", add, add,
                      "plain DTensor a + b", CallOnly))
        torch_mesh = ti.to_torch_mesh(mesh)
        cases.append(("DTensor redistribute Shard -> Replicate (context)",
                      lambda: x.redistribute(torch_mesh, [Replicate()]),
                      lambda: dist.all_reduce(local.clone()), "clone + dist.all_reduce", None))
        found = []
        with torch.no_grad():
            for case, mine, raw, baseline, scope in cases:
                p, r = best_pair(mine, raw, calls, blocks, scope or contextlib.nullcontext)
                found.append({"case": case, "parity_s": p, "raw_s": r, "baseline": baseline})
        return found
    finally:
        dist.destroy_process_group()


def rows(calls: int = CALLS) -> list:
    """The figures as benchmark rows, measured in a child process (the fake
    process group is process-wide). Raises when the child fails."""
    from benchmarks.common import Row, child_records

    out = []
    for data in child_records("benchmarks.per_call", str(calls)):
        out.append(Row("per_call", data["case"] + " (fake group, 4 ranks)", data["parity_s"],
                       data["raw_s"], note=f"vs {data['baseline']}; best of {BLOCKS} blocks of "
                       f"{calls} calls (CPU time); +{(data['parity_s'] - data['raw_s']) * 1e6:.1f} us/call"))
    return out


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else CALLS
    for row in measure(calls):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
