"""Per-op cost of ``jax_semantics()`` against plain DTensor, on the gloo
ranks of ``gloo_job`` (mesh (N/2, 2), ``data`` x ``model``).

Two kinds of op: those that need no extra communication under either
(elementwise on equal layouts, matmul whose contracting dims are
replicated: goal at most 1.10x), and those where JAX's rule adds one
(contracting dims sharded, reductions over a sharded dim: DTensor leaves a
pending ``Partial`` and communicates later or never, JAX completes the
reduction at once, so the ratio includes that collective: reported, no goal).
The random ops (dropout, ``rand_like``) draw the whole global tensor on every
rank under ``jax_semantics()`` (the unsharded program's values) where plain
DTensor on CPU draws each rank's block: the ratio is that cost (no goal);
under ``random="counter"`` each rank hashes only its block's indices
(threefry: ~170 int64 elementwise ops per element), also against plain
DTensor's per-block draw (no goal).
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from benchmarks.common import Row, median, rank_max, timed_pairs

GOAL = 1.10
N = 256


def cases(ti, mesh):
    import parity

    def put(axes, shape=(N, N), seed=0):
        host = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        return ti.distribute_tensor(host, parity.TensorLayout(axes, mesh))

    a, b = put(("data", "model"), seed=1), put(("data", "model"), seed=2)
    rows_sharded, cols_sharded = put(("data", None), seed=3), put((None, "model"), seed=4)
    contract_l, contract_r = put(("data", "model"), seed=5), put(("model", None), seed=6)
    big = 4 * N
    a_big, b_big = (put(("data", "model"), (big, big), seed=s) for s in (7, 8))
    return {
        # no communication under either
        "add, equal layouts": (lambda: a + b, GOAL),
        "relu(a * b), equal layouts": (lambda: torch.relu(a * b), GOAL),
        f"add, equal layouts, {big}x{big}": (lambda: a_big + b_big, GOAL),
        "matmul (data,None)@(None,model)": (lambda: rows_sharded @ cols_sharded, GOAL),
        # JAX completes a reduction DTensor leaves pending
        "matmul (data,model)@(model,None)": (lambda: contract_l @ contract_r, None),
        "sum over a sharded dim": (lambda: a.sum(dim=1), None),
        # every rank draws the global tensor (the unsharded program's values,
        # semantics/random.py); plain DTensor draws each block on CPU
        "dropout p=0.5 (global draw, no communication)": (lambda: F.dropout(a, 0.5), None),
        "rand_like (global draw, no communication)": (lambda: torch.rand_like(a), None),
        # jax_semantics(random="counter"): each rank hashes its block's
        # indices (threefry, semantics/threefry.py), nothing of global size
        "dropout p=0.5 (random='counter': per-block threefry)": (lambda: F.dropout(a, 0.5), None),
        "rand_like (random='counter': per-block threefry)": (lambda: torch.rand_like(a), None),
    }


def calls_per_sample(fn, cfg: dict) -> int:
    """Calls per timed sample: enough for ``cfg["op_sample_s"]`` seconds of
    the raw op (at least ``cfg["op_iters"]``), the same on every rank."""
    import time

    start = time.perf_counter()
    for _ in range(5):
        fn()
    per_call = rank_max([(time.perf_counter() - start) / 5])[0]
    return max(cfg["op_iters"], min(20000, int(cfg.get("op_sample_s", 0) / per_call)))


def on_rank(cfg: dict) -> list[Row]:
    from parity import torch_impl as ti

    import parity

    world = dist.get_world_size()
    mesh = parity.DeviceMesh((world // 2, 2), ("data", "model"))
    ops = cases(ti, mesh)
    label = f"{N}x{N} f32 unless stated, {world} gloo ranks"
    rows = []
    for name, (fn, goal) in ops.items():
        scope = (functools.partial(ti.jax_semantics, random="counter") if "'counter'" in name
                 else ti.jax_semantics)
        try:
            with scope():
                fn()
        except Exception as err:  # noqa: BLE001 - report, keep going
            rows.append(Row("jax_semantics", f"{name} ({label})",
                            status=f"error: {type(err).__name__}: {err}"[:200]))
            dist.barrier()
            continue
        iters = calls_per_sample(fn, cfg)
        repeats = cfg.get("op_repeats", cfg["repeats"])
        p, r = timed_pairs(fn, fn, iters=iters, repeats=repeats,
                           before=dist.barrier, parity_context=scope)
        p_med, r_med = rank_max([median(p), median(r)])
        rows.append(Row("jax_semantics", f"{name} ({label})", p_med, r_med, goal=goal,
                        note=f"vs plain DTensor; {iters} calls x {repeats} samples"
                        + ("" if goal else "; every rank hashes its block" if "'counter'" in name
                           else "; every rank draws the global tensor"
                           if "draw" in name else "; JAX adds a collective")))
    return rows
