"""What one training op costs under ``jax_semantics()``, by kind of call,
against the same call on plain DTensor, on torch's ``fake`` process group.

A ``fake`` group runs every collective as a no-op, so each figure is the
Python and dispatch of each layer. One process, rank 0 of a world of 4, mesh
``(4,)`` ``x``, grad mode on; each figure is the best of 7 blocks of calls,
in this thread's CPU time, parity's and plain DTensor's blocks alternating
(``per_call.best_pair``). The kinds:

* **leaf weight** (a ``requires_grad`` leaf, as a ``Parameter`` is):
  ``x @ w`` (``w`` (64, 64) column-sharded, ``x`` (32, 64) replicated),
  ``torch.relu(w)``, ``F.layer_norm`` of a replicated activation with a
  replicated weight and bias, ``F.embedding`` with a row-sharded table;
  baseline: the same call on plain DTensor;
* **clean call**: ``a + b``, both ``Shard(0)``, no gradient: the fast path;
  baseline: plain DTensor's ``a + b``;
* **reshard**: ``a + c`` with ``a`` ``Shard(0)`` and ``c`` ``Shard(1)``:
  JAX's rule lays ``c`` out as ``a``; baseline: plain DTensor's own
  ``c.redistribute(Shard(0))`` then ``a + c``;
* **pending sum**: ``F.linear(x, w)`` with both ``Shard(1)`` (a row-parallel
  linear): the sum stays pending under the default scope as on plain
  DTensor; baseline: plain DTensor's ``F.linear``.

Run: ``python -m benchmarks.training_ops [CALLS]`` (JSON rows); the
benchmark runner starts it as a subprocess (the process group is
process-wide).
"""

from __future__ import annotations

import json
import sys

WORLD = 4
CALLS = 400


def measure(calls: int = CALLS) -> list[dict]:
    """``[{"kind", "case", "parity_s", "raw_s", "baseline"}, ...]`` on a
    fresh fake group of ``WORLD`` ranks."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from benchmarks.per_call import BLOCKS, best_pair
    from parity import torch_impl as ti

    dist.init_process_group("fake", rank=0, world_size=WORLD, store=FakeStore())
    try:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("x",))
        torch.manual_seed(0)

        def put(shape, placements, grad=False):
            t = distribute_tensor(torch.randn(shape), mesh, placements)
            return t.requires_grad_() if grad else t

        w = put((64, 64), [Shard(1)], grad=True)                 # column-sharded leaf
        x = put((32, 64), [Replicate()])
        act = put((32, 64), [Replicate()])
        gamma, beta = put((64,), [Replicate()], grad=True), put((64,), [Replicate()], grad=True)
        table = put((128, 64), [Shard(0)], grad=True)            # row-sharded embedding
        ids = distribute_tensor(torch.randint(0, 128, (32,)), mesh, [Replicate()])
        a, b = put((64, 64), [Shard(0)]), put((64, 64), [Shard(0)])
        c = put((64, 64), [Shard(1)])
        xs, ws = put((32, 64), [Shard(1)]), put((48, 64), [Shard(1)])

        cases = [
            ("leaf weight", "x @ w, w a column-sharded leaf, x replicated",
             lambda: x @ w, lambda: x @ w, "plain DTensor x @ w"),
            ("leaf weight", "torch.relu(w), w that leaf",
             lambda: torch.relu(w), lambda: torch.relu(w), "plain DTensor torch.relu(w)"),
            ("leaf weight", "F.layer_norm(act, (64,), gamma, beta), leaf gamma and beta",
             lambda: F.layer_norm(act, (64,), gamma, beta),
             lambda: F.layer_norm(act, (64,), gamma, beta), "plain DTensor F.layer_norm"),
            ("leaf weight", "F.embedding(ids, table), table a row-sharded leaf",
             lambda: F.embedding(ids, table), lambda: F.embedding(ids, table),
             "plain DTensor F.embedding"),
            ("clean call", "a + b, both Shard(0), no gradient",
             lambda: a + b, lambda: a + b, "plain DTensor a + b"),
            ("reshard", "a + c, a Shard(0), c Shard(1): c laid out as a",
             lambda: a + c, lambda: a + c.redistribute(mesh, [Shard(0)]),
             "plain DTensor c.redistribute(Shard(0)) then a + c"),
            ("pending sum", "F.linear(xs, ws), both Shard(1): the sum stays pending",
             lambda: F.linear(xs, ws), lambda: F.linear(xs, ws), "plain DTensor F.linear"),
        ]
        found = []
        for kind, case, mine, raw, baseline in cases:
            grad = kind != "clean call"
            with torch.set_grad_enabled(grad):
                p, r = best_pair(mine, raw, calls, BLOCKS, ti.jax_semantics)
            found.append({"kind": kind, "case": case, "parity_s": p, "raw_s": r,
                          "baseline": baseline, "calls": calls})
        return found
    finally:
        dist.destroy_process_group()


def rows(calls: int = CALLS) -> list:
    """The figures as benchmark rows, measured in a child process (the fake
    process group is process-wide). Raises when the child fails."""
    from benchmarks.common import Row, child_records
    from benchmarks.per_call import BLOCKS

    out = []
    for data in child_records("benchmarks.training_ops", str(calls)):
        extra = (data["parity_s"] - data["raw_s"]) * 1e6
        out.append(Row("training_ops", f"{data['kind']}: {data['case']} (fake group, 4 ranks)",
                       data["parity_s"], data["raw_s"],
                       note=f"vs {data['baseline']}; best of {BLOCKS} blocks of {calls} calls "
                       f"(CPU time); {extra:+.1f} us/call"))
    return out


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else CALLS
    for row in measure(calls):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
