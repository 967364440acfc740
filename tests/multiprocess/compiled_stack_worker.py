"""Run under torchrun with 4 gloo ranks: the whole training step of torch's
test Transformer (TP, or FSDP2 + TP) inside ``torch.compile``
(``aot_eager``) under ``jax_semantics()``: forward, cross-entropy,
backward, Adam, 3 steps, against the same model unsharded in this process
(``torch_stack_worker``'s model, data and reference).

Configurations (the arguments; default: all): ``tp`` (1-D mesh ``("tp",)``
of 4), ``fsdp_tp`` (mesh (2, 2) ``("dp", "tp")``, TP over ``mesh["tp"]``,
FSDP2 over ``mesh["dp"]``, each dp half of the batch on its ranks),
``fsdp_tp_static`` (the same, ``torch.compile(dynamic=False)``: FSDP2's
hooks break the graph around every block, TP's hook lambdas become frames
shared by every module and recompile with other shapes, and dynamo's
automatic dynamic shapes then make AOTAutograd fail with ``RecursionError``
on the symbolic DTensor shapes; docs/torch-stack.md, "Compiled steps"). Rank 0
writes per configuration the losses, the unsharded losses and the largest
weight difference, or the error, to ``PARITY_RESULT_FILE`` (when set) and
prints them; ``tests/test_compiled_stack.py`` asserts on them.
"""

from __future__ import annotations

import os
import sys
import traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.tensor import DTensor
from torch.testing._internal.distributed._tensor.common_dtensor import Transformer

from parity import torch_impl as ti
from rank_result import report
from torch_stack_worker import BATCH, STEPS, data, full, model_args, parallelize, reference

CONFIGS = {"tp": {}, "fsdp_tp": {"fsdp": True}, "fsdp_tp_static": {"fsdp": True, "dynamic": False}}


def run(config: dict) -> dict:
    torch.manual_seed(0)
    base = Transformer(model_args(False))
    ref = reference(base, {})
    model, dp_mesh = parallelize(base, config)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    placements = _placements(model)

    @torch.compile(backend="aot_eager", dynamic=config.get("dynamic"))
    def step(tokens, labels):
        loss = F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    losses = []
    for i in range(STEPS):
        tokens, labels = data(i)
        if dp_mesh is not None:  # each dp half of the batch on its ranks
            half, r = BATCH // 2, dp_mesh.get_local_rank()
            tokens, labels = tokens[r * half:(r + 1) * half], labels[r * half:(r + 1) * half]
        with ti.jax_semantics():
            loss = step(tokens, labels)
        value = full(loss.detach()).reshape(()).clone()
        if dp_mesh is not None:  # the global batch's loss: the mean of the halves
            dist.all_reduce(value, group=dp_mesh.get_group())
            value = value / dp_mesh.size()
        losses.append(value.item())
    diff = max((full(p).detach() - ref["weights"][n]).abs().max().item()
               for n, p in model.named_parameters())
    return {"ok": True, "losses": losses, "ref_losses": ref["losses"], "weight_diff": diff,
            "sharded": len(placements), "placements_kept": _placements(model) == placements}


def _placements(model) -> dict:
    """Each DTensor parameter's placements, by name."""
    return {n: [str(p) for p in w.placements] for n, w in model.named_parameters()
            if isinstance(w, DTensor)}


def main() -> None:
    ti.initialize()
    results = {}
    for name in sys.argv[1:] or list(CONFIGS):
        try:
            results[name] = run(CONFIGS[name])
        except Exception as err:  # noqa: BLE001 - the test reports what fails
            lines = str(err).strip().splitlines()
            results[name] = {"ok": False,
                             "error": f"{type(err).__name__}: {lines[0][:400] if lines else ''}"}
            if ti.process_id() == 0:
                traceback.print_exc()
        if ti.process_id() == 0:
            print(f"COMPILED {name}: {results[name]}", flush=True)
        torch._dynamo.reset()
    if os.environ.get("PARITY_RESULT_FILE"):
        report(results)


if __name__ == "__main__":
    main()
