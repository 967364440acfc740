"""Run under torchrun (gloo ranks): count the collectives one training step
of the tensor-parallel (Megatron) MLP issues under ``jax_semantics()``,
eager and under ``torch.compile``, from the profiler's record of the
process-group calls (``c10d::allreduce_``, ``c10d::_allgather_base_``, ...):
every collective reaches one, DTensor's functional ones
(``_c10d_functional::all_reduce``) included, so each is counted once.

The model is ``compiled_step_worker``'s: w1 column-parallel, w2
row-parallel on mesh axis ``model``, ``mean((tanh(x @ w1) @ w2 - 1) ** 2)``,
a hand-written SGD update. With one argument ``1d`` the mesh is
``(world,)`` ``("model",)`` and x replicated; with ``2d`` it is
``(2, world // 2)`` ``("batch", "model")`` and x's rows are sharded on
``batch`` (data and tensor parallel). The runs: ``"eager"`` (the default,
pending sums deferred); ``"eager at once"`` (eager under
``jax_semantics(defer=False)``: each sum completed where it arises); under
``defer=False`` too: ``"compiled"``
(``torch.compile(step, backend="aot_eager")``); ``"compiled bucketed"``
(parity's ``aot_eager_bucketed``, ``collectives/compiled_buckets.py``);
with ``2d`` also ``"compiled default"`` (``torch.compile(step)``, no
backend named: inductor, whose all-reduce bucketing ``jax_semantics()``
turns on). The
step is warmed up (compiled) first; the counted step is the second call.
Rank 0 writes ``{run: {op: count}}``, under ``"<run> in backward"`` the
collectives of that step that ran inside torch's ``backward`` call (the
profiler's Python frames above the collective hold ``Tensor.backward`` or
``torch.autograd.backward``: the backward's own nodes, eager or a compiled
backward graph, and what completes when it returns), and under
``"<run> values"`` the loss, weight sums and placements after one more
step, as JSON to the file named by ``PARITY_RESULT_FILE``.
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import compiled_step_worker as csw  # noqa: E402
from parity import torch_impl as ti  # noqa: E402
from parity.torch_impl.collectives.compiled_buckets import aot_eager_bucketed  # noqa: E402
from rank_result import report  # noqa: E402

import parity  # noqa: E402

# The process-group ops, under HLO's names (barriers, sends and waits are
# not collectives).
COLLECTIVES = {
    "allreduce": "all-reduce", "allgather": "all-gather", "allgatherintotensor": "all-gather",
    "reducescatter": "reduce-scatter", "reducescattertensor": "reduce-scatter",
    "alltoall": "all-to-all", "broadcast": "broadcast",
}


def collective_name(event_name: str) -> str | None:
    """``"all-reduce"`` for ``c10d::allreduce_``, ``"all-gather"`` for
    ``c10d::_allgather_base_`` ...; ``None`` for any other event."""
    if not event_name.startswith("c10d::"):
        return None
    op = event_name[len("c10d::"):].replace("_", "").replace("base", "").replace("coalesced", "")
    return COLLECTIVES.get(op)


# torch's backward entry points, as the profiler names their Python frames
# (``with_stack=True``): ``torch/_tensor.py(566): backward``.
BACKWARD_FRAME = re.compile(r"torch/(_tensor|autograd/__init__)\.py\(\d+\): backward$")


def inside_backward(event) -> bool:
    """Whether a profiler event ran inside torch's ``backward`` call."""
    parent = event.cpu_parent
    while parent is not None:
        if BACKWARD_FRAME.search(parent.name):
            return True
        parent = parent.cpu_parent
    return False


def collectives_in(prof, where=lambda event: True) -> dict[str, int]:
    """The collectives a profiler recorded (those ``where`` accepts), counted by name."""
    found = Counter()
    for event in prof.events():
        name = collective_name(event.name)
        if name is not None and where(event):
            found[name] += 1
    return dict(found)


def count(fn, x) -> tuple[dict[str, int], dict[str, int]]:
    """The collectives of one step: all of them, and those inside its backward."""
    fn(x)  # warm-up: compiles, fills the caches
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        fn(x)
    return collectives_in(prof), collectives_in(prof, inside_backward)


def main() -> None:
    ti.initialize()
    world = ti.num_processes()
    if sys.argv[1:2] == ["2d"]:
        mesh = parity.DeviceMesh((2, world // 2), ("batch", "model"))
        x_spec = ("batch", None)
    else:
        mesh = parity.DeviceMesh((world,), ("model",))
        x_spec = (None, None)
    x = ti.distribute_tensor(csw.host((8, 16), 0), parity.TensorLayout(x_spec, mesh))
    results = {}
    # run -> (how the step is compiled (None: eager), jax_semantics's defer)
    runs = {"eager": (None, True),  # the default: pending sums deferred
            "eager at once": (None, False),
            "compiled": (lambda step: torch.compile(step, backend="aot_eager"), False),
            "compiled bucketed": (lambda step: torch.compile(step, backend=aot_eager_bucketed),
                                  False)}
    if sys.argv[1:2] == ["2d"]:
        runs["compiled default"] = (torch.compile, False)  # no backend named: inductor
    for name, (compile_step, defer) in runs.items():
        with ti.jax_semantics(defer=defer):
            torch._dynamo.reset()
            params = csw.make_params(mesh)
            step = csw.make_step("hand", params)
            fn = step if compile_step is None else compile_step(step)
            results[name], results[name + " in backward"] = count(fn, x)
            results[name + " values"] = {
                "loss": float(fn(x).full_tensor()),
                "weights": [p.full_tensor().sum().item() for p in params],
                "placements": [str(p.placements) for p in params]}
    report(results, echo=True)


if __name__ == "__main__":
    main()
