"""Run under torchrun (2 gloo ranks): a user's whole training step --
forward, loss, ``loss.backward()``, optimizer update -- under one
``torch.compile``, eager and compiled, for each update named on the command
line (``sgd``, ``adam``, ``hand``).

``PARITY_RAW=1`` runs plain DTensor (no ``jax_semantics()``), to show the
upstream failure parity works around. Rank 0 writes, per update, the eager
and compiled losses, weights, placements, dynamo's graph and graph-break
counts, or the compiled run's error (type and message), as JSON to the file
named by ``PARITY_RESULT_FILE``.

The model: the tensor-parallel MLP of issue 15 -- x replicated, w1
``Shard(1)`` (column-parallel), w2 ``Shard(0)`` (row-parallel),
``mean((tanh(x @ w1) @ w2 - 1) ** 2)`` -- two steps, so Adam's state and a
second run of the compiled code are checked too. ``PARITY_FULLGRAPH=1``
also compiles the forward and loss alone with ``fullgraph=True``.
"""

from __future__ import annotations

import contextlib
import os
import sys

import numpy as np
import torch
from torch._dynamo.utils import counters

import parity
from parity import torch_impl as ti
from rank_result import report

L = parity.TensorLayout
STEPS = 2
LR = 0.1


def host(shape, seed):
    return (np.random.default_rng(seed).standard_normal(shape) * 0.3).astype(np.float32)


def make_params(mesh):
    w1 = ti.distribute_variable(host((16, 32), 1), L((None, "model"), mesh))
    w2 = ti.distribute_variable(host((32, 8), 2), L(("model", None), mesh))
    return [w1, w2]


def loss_of(x, w1, w2):
    return (torch.tanh(x @ w1) @ w2 - 1).pow(2).mean()


def make_step(update, params):
    if update == "sgd":
        opt = torch.optim.SGD(params, lr=LR)
    elif update == "adam":
        opt = torch.optim.Adam(params, lr=LR)
    elif update == "hand":
        opt = None
    else:
        raise SystemExit(f"unknown update {update!r}: sgd, adam or hand")

    def step(x):
        loss = loss_of(x, *params)
        loss.backward()
        if opt is None:
            with torch.no_grad():
                for p in params:
                    p.sub_(LR * p.grad)
                    p.grad = None
        else:
            opt.step()
            opt.zero_grad()
        return loss

    return step


def run(update, compiled, mesh, x, scope):
    torch._dynamo.reset()
    counters.clear()
    params = make_params(mesh)
    step = make_step(update, params)
    fn = torch.compile(step, backend="aot_eager") if compiled else step
    out = {}
    try:
        with scope():
            losses = [float(ti.to_numpy(fn(x))) for _ in range(STEPS)]
    except Exception as err:  # reported to the test, which asserts on it
        out["error"] = {"type": type(err).__name__, "message": str(err)[:2000]}
        return out
    out.update(
        losses=losses,
        params=[ti.to_numpy(p).tolist() for p in params],
        specs=[ti.describe(p).spec for p in params],
        graphs=counters["stats"]["unique_graphs"],
        graph_breaks=sum(counters["graph_break"].values()),
        break_reasons=sorted(counters["graph_break"]),
        mode_frames=mode_frames_compiled(),
    )
    return out


def mode_frames_compiled() -> int:
    """How many graphs dynamo holds for the mode's ``__torch_function__`` as a
    top-level frame (op by op); parity's ``skip_alone`` keeps this 0."""
    from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

    from parity.torch_impl.semantics.mode import _JaxSemanticsMode

    return len(_debug_get_cache_entry_list(_JaxSemanticsMode.__torch_function__.__code__))


def fullgraph_forward(mesh, x, scope):
    """Forward and loss under ``fullgraph=True``; then the backward (eager)
    through AOTAutograd's compiled backward. Returns the loss and gradients
    with their placements, eager and compiled."""
    result = {}
    for name in ("eager", "compiled"):
        torch._dynamo.reset()
        params = make_params(mesh)
        fn = torch.compile(loss_of, backend="aot_eager", fullgraph=True) if name == "compiled" else loss_of
        with scope():
            loss = fn(x, *params)
            loss.backward()
        result[name] = {
            "loss": float(ti.to_numpy(loss)),
            "grads": [ti.to_numpy(p.grad).tolist() for p in params],
            "grad_specs": [ti.describe(p.grad).spec for p in params],
        }
    return result


def main() -> None:
    updates = sys.argv[1:]
    ti.initialize()
    mesh = parity.DeviceMesh((ti.num_processes(),), ("model",))
    x = ti.distribute_tensor(host((8, 16), 0), L((None, None), mesh))
    raw = os.environ.get("PARITY_RAW") == "1"
    scope = contextlib.nullcontext if raw else ti.jax_semantics
    results = {u: {"eager": run(u, False, mesh, x, scope), "compiled": run(u, True, mesh, x, scope)}
               for u in updates}
    if os.environ.get("PARITY_FULLGRAPH") == "1":
        results["fullgraph_forward"] = fullgraph_forward(mesh, x, scope)
    report(results)


if __name__ == "__main__":
    main()
