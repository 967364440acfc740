"""Run under torchrun with 4 gloo ranks: ``F.cross_entropy`` inside torch's
``loss_parallel()`` on logits sharded over the classes, with each option
(``CASES``: label smoothing, ``ignore_index``, a class ``weight``, a target
of class probabilities, and together; each ``REDUCTIONS``), under
``jax_semantics()`` and under plain DTensor, in one job.

Rank 0 writes, per ``case/reduction``, parity's loss and logits gradient
(global values) and plain DTensor's (or the error it raised) to
``PARITY_RESULT_FILE``; ``tests/test_loss_parallel_options.py`` compares them
with ``reference`` (the unsharded computation). The same module gives that
test its simulated-rank runs (``run_parity``, ``run_plain``).

Plain DTensor is handed what its docstring asks for: the target and weight
as replicated DTensors (a target of probabilities sharded as the logits);
parity the plain tensors a user writes.
"""

from __future__ import annotations

import traceback

import numpy as np
import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import loss_parallel

import parity
from parity import torch_impl as ti

L = parity.TensorLayout
N, C = 8, 16  # batch, classes (4 per rank)
IGNORED = 3  # the class ignore_index names; the target hits it twice

# name: cross_entropy's options ("weight": True for the class weights,
# "probabilities": a target of class probabilities instead of indices)
CASES = {
    "default": {},
    "label_smoothing": {"label_smoothing": 0.1},
    "ignore_index": {"ignore_index": IGNORED},
    "weight": {"weight": True},
    "smoothing_ignore_weight": {"label_smoothing": 0.1, "ignore_index": IGNORED, "weight": True},
    "probabilities": {"probabilities": True},
    "probabilities_smoothing_weight": {"probabilities": True, "label_smoothing": 0.2,
                                       "weight": True},
}
REDUCTIONS = ("mean", "sum", "none")


def inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    target = rng.integers(0, C, (N,))
    target[[1, 5]] = IGNORED
    return {
        "logits": rng.standard_normal((N, C)).astype(np.float32),
        "target": target,
        "probabilities": rng.dirichlet(np.ones(C), N).astype(np.float32),
        "weight": rng.uniform(0.5, 2.0, (C,)).astype(np.float32),
    }


def _call(x, case: dict, reduction: str, target, weight):
    kwargs = {k: v for k, v in case.items() if k in ("label_smoothing", "ignore_index")}
    return F.cross_entropy(x, target, weight if case.get("weight") else None,
                           reduction=reduction, **kwargs)


def reference(case: dict, reduction: str) -> tuple[np.ndarray, np.ndarray]:
    """The unsharded loss and logits gradient (of ``loss.sum()``)."""
    data = inputs()
    x = torch.tensor(data["logits"], requires_grad=True)
    target = torch.tensor(data["probabilities" if case.get("probabilities") else "target"])
    loss = _call(x, case, reduction, target, torch.tensor(data["weight"]))
    loss.sum().backward()
    return loss.detach().numpy(), x.grad.numpy()


def run_parity(case: dict, reduction: str, mesh: parity.DeviceMesh,
               defer: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Under ``jax_semantics(defer=defer)``: the loss and logits gradient."""
    data = inputs()
    x = ti.distribute_variable(data["logits"], L((None, "model"), mesh))
    target = torch.tensor(data["probabilities" if case.get("probabilities") else "target"])
    with ti.jax_semantics(defer=defer), loss_parallel():
        loss = _call(x, case, reduction, target, torch.tensor(data["weight"]))
        loss.sum().backward()
        return ti.to_numpy(loss), ti.to_numpy(x.grad)


def run_plain(case: dict, reduction: str, mesh: parity.DeviceMesh) -> dict:
    """Plain DTensor's outcome: ``{"ok": True, "loss", "grad"}`` (lists) or
    ``{"ok": False, "error"}``."""
    data = inputs()
    x = ti.distribute_variable(data["logits"], L((None, "model"), mesh))
    dmesh = x.device_mesh
    if case.get("probabilities"):
        target = DTensor.from_local(torch.tensor(data["probabilities"]), dmesh, [Replicate()],
                                    run_check=False).redistribute(dmesh, [Shard(1)])
    else:
        target = DTensor.from_local(torch.tensor(data["target"]), dmesh, [Replicate()],
                                    run_check=False)
    weight = DTensor.from_local(torch.tensor(data["weight"]), dmesh, [Replicate()],
                                run_check=False)
    try:
        with loss_parallel():
            loss = _call(x, case, reduction, target, weight)
            loss.sum().backward()
        return {"ok": True, "loss": loss.full_tensor().detach().numpy().tolist(),
                "grad": x.grad.full_tensor().numpy().tolist()}
    except Exception as err:  # what plain DTensor raises is the record
        return {"ok": False, "error": f"{type(err).__name__}: {str(err).splitlines()[0]}"}


def main() -> None:
    from rank_result import report

    ti.initialize()
    mesh = parity.DeviceMesh((4,), ("model",))
    results = {}
    for name, case in CASES.items():
        for reduction in REDUCTIONS:
            key = f"{name}/{reduction}"
            try:
                loss, grad = run_parity(case, reduction, mesh)
                results[key] = {"parity": {"ok": True, "loss": loss.tolist(),
                                           "grad": grad.tolist()}}
            except Exception as err:
                traceback.print_exc()
                results[key] = {"parity": {"ok": False,
                                           "error": f"{type(err).__name__}: {err}"}}
            results[key]["plain"] = run_plain(case, reduction, mesh)
    report(results)


if __name__ == "__main__":
    main()
