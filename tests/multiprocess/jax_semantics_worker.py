"""Run under torchrun with 4 gloo ranks: one training step of an MLP with
sharded weights under ``jax_semantics()``, eager and under ``torch.compile``
(backends named on the command line). Rank 0 writes the losses and updated
weights of each run as JSON to the file named by ``PARITY_RESULT_FILE`` (a
file, not stdout: torchrun's ranks share one stdout pipe, where a long line
from one rank can interleave with another rank's output).

What compiles: the whole step as one function, as users write it --
forward, loss, ``loss.backward()`` and the SGD update under one
``torch.compile``. Dynamo breaks the graph at the backward (it cannot trace
one); the forward and loss are one graph (AOTAutograd compiles their
backward, which the eager backward runs) and the update another.
``graphs``/``graph_breaks`` in the result count them. Plain DTensor cannot
do this (``tests/test_compiled_step.py`` shows it fail): parity's
workarounds are in ``parity/torch_impl/semantics/compile_support.py``.

torch.compile cannot run over simulated ranks (LocalTensorMode): dynamo fails
inside DTensor's own redistribute planner there, with or without parity, so
the compiled step is checked on real ranks.
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from torch._dynamo.utils import counters

import parity
from parity import torch_impl as ti
from rank_result import report

L = parity.TensorLayout


def host(shape, seed):
    return (np.random.default_rng(seed).standard_normal(shape) * 0.3).astype(np.float32)


def main() -> None:
    backends = sys.argv[1:]  # torch.compile backends to check besides eager
    ti.initialize()
    mesh = parity.DeviceMesh((2, 2), ("data", "model"))
    x_host, target = host((8, 16), 0), host((8, 8), 3)
    results = {}
    for backend in ["eager", *backends]:
        torch._dynamo.reset()
        w1 = ti.distribute_variable(host((16, 32), 1), L((None, "model"), mesh))
        b1 = ti.distribute_variable(host((32,), 2), L(("model",), mesh))
        w2 = ti.distribute_variable(host((32, 8), 4), L(("model", None), mesh))
        params = (w1, b1, w2)
        x = ti.distribute_tensor(x_host, L(("data", None), mesh))

        def step(x, target):
            h = torch.relu(x @ w1 + b1)
            loss = ((h @ w2 - target) ** 2).mean()  # target: a plain tensor
            loss.backward()
            with torch.no_grad():
                for p in params:
                    p.sub_(0.1 * p.grad)
            return loss

        fn = step if backend == "eager" else torch.compile(step, backend=backend)
        counters.clear()
        with ti.jax_semantics():
            loss = fn(x, torch.from_numpy(target))
        results[backend] = {
            "graphs": counters["stats"]["unique_graphs"],
            "graph_breaks": sum(counters["graph_break"].values()),
            "loss": float(ti.to_numpy(loss)),
            "params": [ti.to_numpy(p).tolist() for p in params],
            "specs": [ti.describe(p).spec for p in params],
            "grad_specs": [ti.describe(p.grad).spec for p in params],
        }
    report(results)


if __name__ == "__main__":
    main()
