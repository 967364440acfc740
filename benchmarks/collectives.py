"""parity's all_reduce / all_gather / reduce_scatter against the raw
``torch.distributed`` collective on the same buffers, over the gloo ranks of
``gloo_job`` (goal: at most 1.05x).

Sizes are each rank's block. The raw calls are what a user of
``torch.distributed`` writes: in place for all_reduce, preallocated outputs
for ``all_gather_single`` / ``reduce_scatter_single``.

parity's collectives are functional (JAX's meaning: a new array, the input
untouched), so each call allocates its output (and all_reduce copies its
input first). A second, informational row per case times the raw collective
doing that same allocation (``clone`` + in-place all_reduce; a fresh output
for the others): the ratio against it is what parity's own code costs.

A third row for ``all_reduce`` calls parity with ``donate=True`` (JAX's
``donate_argnums``; each call consumes the previous result) against the
same in-place raw call as the first row: both reduce one buffer in place.
``all_gather`` and ``reduce_scatter`` take ``donate=True`` too, but their
output differs in size from the input, so they allocate it regardless (no
third row: it would equal the first).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from benchmarks.common import Row, human_bytes, median, rank_max, timed_pairs

# The raw calls under their torch 2.13 names, or the older ones before 2.13.
from parity.torch_impl.runtime.torch_compat import dist_all_gather_single as _all_gather
from parity.torch_impl.runtime.torch_compat import dist_reduce_scatter_single as _reduce_scatter

GOAL = 1.05


def iterations(size: int) -> int:
    """Calls per sample: enough to lift a sample above timer noise, few enough
    that 4 ranks on 2 shared cores finish the family in a few minutes."""
    return 20 if size <= (64 << 10) else 10 if size <= (1 << 20) else 3 if size <= (16 << 20) else 1


def on_rank(cfg: dict) -> list[Row]:
    import parity
    from parity import torch_impl as ti

    from parity.torch_impl.runtime import state

    device = state.torch_device()
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    world = dist.get_world_size()
    mesh = parity.DeviceMesh((world,), ("x",))
    layout = parity.TensorLayout(("x",), mesh)
    rows = []
    for size in cfg["sizes"]:
        n = size // 4
        x = ti.distribute_data_input(torch.zeros(n), layout)  # this rank's block: n floats
        buf = x.to_local()
        gathered = torch.empty(n * world, device=device)
        scattered = torch.empty(n // world, device=device)
        cases = {
            "all_reduce": (lambda: ti.all_reduce(x, "sum", axis_name="x"),
                           lambda: dist.all_reduce(buf)),
            "all_gather": (lambda: ti.all_gather(x, 0, "x"),
                           lambda: _all_gather(gathered, buf)),
            "reduce_scatter": (lambda: ti.reduce_scatter(x, 0, "x"),
                               lambda: _reduce_scatter(scattered, buf)),
        }
        allocating = {
            "all_reduce": lambda: dist.all_reduce(buf.clone()),
            "all_gather": lambda: _all_gather(torch.empty_like(gathered), buf),
            "reduce_scatter": lambda: _reduce_scatter(torch.empty_like(scattered), buf),
        }
        donor = [ti.distribute_data_input(torch.zeros(n), layout)]

        def donating_all_reduce():  # each result is the next call's (donated) input
            donor[0] = ti.all_reduce(donor[0], "sum", axis_name="x", donate=True)

        repeats = cfg["repeats"] if size < (16 << 20) else 3
        label = f"{human_bytes(size)}/rank x{world} {dist.get_backend()}"
        for name, (mine, raw) in cases.items():
            p, r = timed_pairs(mine, raw, iters=iterations(size), repeats=repeats,
                               before=dist.barrier, sync=sync)
            p_med, r_med = rank_max([median(p), median(r)])
            rows.append(Row("collectives", f"{name} {label}", p_med, r_med, goal=GOAL,
                            note=f"{iterations(size)} calls x {repeats} samples"))
            p, r = timed_pairs(mine, allocating[name], iters=iterations(size), repeats=repeats,
                               before=dist.barrier, sync=sync)
            p_med, r_med = rank_max([median(p), median(r)])
            rows.append(Row("collectives", f"{name} {label}, raw allocating its output",
                            p_med, r_med, note="info: parity's own cost"))
            if name != "all_reduce":
                continue  # see the module docstring: the others allocate regardless
            p, r = timed_pairs(donating_all_reduce, raw, iters=iterations(size), repeats=repeats,
                               before=dist.barrier, sync=sync)
            p_med, r_med = rank_max([median(p), median(r)])
            rows.append(Row("collectives", f"{name} {label}, parity donate=True", p_med, r_med,
                            goal=GOAL, note="vs the raw call in place; input donated"))
    return rows
