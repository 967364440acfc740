"""Run under torchrun with 4 gloo ranks: one training step of an MLP with
sharded weights under ``jax_semantics()``, eager and under ``torch.compile``
(backends named on the command line). Rank 0 writes the losses and updated
weights of each run as JSON to the file named by ``PARITY_RESULT_FILE`` (a
file, not stdout: torchrun's ranks share one stdout pipe, where a long line
from one rank can interleave with another rank's output).

What compiles: the whole step, in two compiled functions, as torch users
compile a model and its optimizer step: the forward and the loss (one graph,
no graph break; AOTAutograd compiles their backward with them, and
``loss.backward()`` runs that compiled backward), and the SGD update (its own
graphs: one per weight layout). ``graphs``/``graph_breaks`` in the result
count them. ``PARITY_COMPILE_WHOLE_STEP=1`` compiles the step as one function
instead: dynamo breaks the graph at ``loss.backward()`` and then fails in
DTensor's ``__tensor_unflatten__`` on the update, also without parity
(``PARITY_RAW=1``).

torch.compile cannot run over simulated ranks (LocalTensorMode): dynamo fails
inside DTensor's own redistribute planner there, with or without parity, so
the compiled step is checked on real ranks.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

import numpy as np
import torch

import parity
from parity import torch_impl as ti

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

        def forward(x, target):
            h = torch.relu(x @ w1 + b1)
            return ((h @ w2 - target) ** 2).mean()  # target: a plain tensor

        whole = os.environ.get("PARITY_COMPILE_WHOLE_STEP") == "1"
        compiled = forward if backend == "eager" or whole else torch.compile(forward, backend=backend)

        def update():
            with torch.no_grad():
                for p in params:
                    p.sub_(0.1 * p.grad)

        compiled_update = update if backend == "eager" or whole else torch.compile(update, backend=backend)

        def step(x, target):
            loss = compiled(x, target)  # forward and loss compiled; backward runs the
            loss.backward()             # compiled backward graph AOTAutograd made
            compiled_update()           # the SGD update compiled on its own
            return loss

        fn = torch.compile(step, backend=backend) if whole and backend != "eager" else step
        raw = os.environ.get("PARITY_RAW") == "1"  # plain DTensor, for comparison
        t = ti.distribute_tensor(target, L((None, None), mesh)) if raw else torch.from_numpy(target)
        from torch._dynamo.utils import counters

        counters.clear()
        with contextlib.nullcontext() if raw else ti.jax_semantics():
            loss = fn(x, t)
        results[backend] = {
            "graphs": counters["stats"]["unique_graphs"],
            "graph_breaks": sum(counters["graph_break"].values()),
            "loss": float(ti.to_numpy(loss)),
            "params": [ti.to_numpy(p).tolist() for p in params],
            "specs": [ti.describe(p).spec for p in params],
            "grad_specs": [ti.describe(p.grad).spec for p in params],
        }
    if ti.process_id() == 0:
        with open(os.environ["PARITY_RESULT_FILE"], "w") as f:
            json.dump(results, f)
    print(f"rank {ti.process_id()}: ok", flush=True)


if __name__ == "__main__":
    main()
