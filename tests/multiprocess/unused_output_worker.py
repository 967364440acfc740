"""Run under torchrun (2 gloo ranks): a compiled function returns two
DTensor outputs that require grad and the backward reaches only the first
(pytorch#173123: the autograd engine hands AOTAutograd a plain zero
gradient for the second). Keras's compiled ``train_step`` does this: its
forward graph returns the loss and ``y_pred``, and the backward starts at
the loss.

Runs plain DTensor and ``jax_semantics()``, eager and compiled; rank 0
writes, per scope, the eager and compiled gradient of the weight (global
value and placement spec) or the compiled run's error, as JSON to the file
named by ``PARITY_RESULT_FILE``.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

import parity
from parity import torch_impl as ti
from rank_result import report

L = parity.TensorLayout


def forward(x, w):
    h = x @ w
    return h.tanh().sum(), h * 2  # the second output is not differentiated


def run(mesh, scope, compiled):
    torch._dynamo.reset()
    rng = np.random.default_rng(0)
    x = ti.distribute_tensor(rng.standard_normal((8, 4)).astype(np.float32), L(("model", None), mesh))
    w = ti.distribute_variable(rng.standard_normal((4, 6)).astype(np.float32), L((None, None), mesh))
    fn = torch.compile(forward, backend="aot_eager") if compiled else forward
    try:
        with scope():
            loss, _unused = fn(x, w)
            loss.backward()
    except Exception as err:  # reported to the test, which asserts on it
        return {"error": {"type": type(err).__name__, "message": str(err)[:1500]}}
    return {"grad": ti.to_numpy(w.grad).tolist(), "spec": ti.describe(w.grad).spec}


def main() -> None:
    ti.initialize()
    mesh = parity.DeviceMesh((ti.num_processes(),), ("model",))
    results = {
        name: {"eager": run(mesh, scope, False), "compiled": run(mesh, scope, True)}
        for name, scope in (("raw", contextlib.nullcontext), ("parity", ti.jax_semantics))
    }
    report(results)


if __name__ == "__main__":
    main()
