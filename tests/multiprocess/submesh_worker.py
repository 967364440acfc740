"""Run under torchrun with 4 gloo ranks: FSDP2 + TP with parameters on a
mesh and on its submesh (``layouts/submesh.py``), one job.

torch's own test model and plan (``common_dtensor.Transformer``,
``Transformer.parallelize`` over ``mesh["tp"]``, ``fully_shard`` over
``mesh["dp"]`` per block and at the root, as torch's FSDP2 + TP tests
compose them): the linear weights land on the ``(dp, tp)`` mesh, the norms'
weights on the ``dp`` submesh. ``clip_grad_norm_(1.0)`` (foreach, and per
tensor: its default for DTensor gradients) and AdamW (foreach, fused), 2 steps,
under ``jax_semantics()``, eager and compiled (``aot_eager``), against the
model unsharded in this process. Plain DTensor's outcome is recorded beside
(its training step, and its ``clip_grad_norm_`` over the same gradients).
A 1-D ``dp`` mesh built apart (``DeviceMesh.from_group``: another rank map,
no torch relation) meets the 2-D mesh's arrays by names and ranks. Rank 0
writes the outcomes to ``PARITY_RESULT_FILE``; ``tests/test_submesh_ranks.py``
asserts on them.
"""

from __future__ import annotations

import copy
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from rank_result import report
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor
from torch_stack_worker import (
    compare,
    data,
    full,
    misplaced_gradients,
    model_args,
    outcome,
    parallelize,
    placements,
)
from torch.testing._internal.distributed._tensor.common_dtensor import Transformer

from parity import torch_impl as ti

STEPS = 2
BATCH = 8
CONFIGS = {
    "eager_foreach": {"clip_foreach": True, "adamw": {"foreach": True}},
    "eager_fused": {"clip_foreach": False, "adamw": {"fused": True}},
    "compiled_foreach": {"clip_foreach": True, "adamw": {"foreach": True}, "compile": True},
}


def adamw(params, config: dict) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1, **config["adamw"])


def step_of(model, opt, config: dict):
    def step(tokens, labels):
        loss = F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=config["clip_foreach"])
        opt.step()
        return loss

    if config.get("compile"):
        return torch.compile(step, backend="aot_eager", dynamic=False)
    return step


def reference(base: Transformer, config: dict) -> dict:
    model = copy.deepcopy(base)
    opt = adamw(model.parameters(), {"adamw": {}})
    losses = []
    for step in range(STEPS):
        tokens, labels = data(step)
        loss = F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return {"losses": losses, "weights": {n: p.detach().clone() for n, p in model.named_parameters()}}


def meshes_of(model) -> list:
    """The distinct meshes of the model's parameters, as ``(axis names, placements)`` samples."""
    seen = {}
    for p in model.parameters():
        seen.setdefault(tuple(p.device_mesh.mesh_dim_names), str(tuple(p.placements)))
    return sorted(seen.items())


def train(base: Transformer, config: dict, semantics: bool) -> dict:
    model, dp_mesh = parallelize(base, {"fsdp": True})
    opt = adamw(model.parameters(), config)
    step_fn = step_of(model, opt, config)
    before = placements(model)
    half = BATCH // 2
    dp_rank = dp_mesh.get_local_rank()
    losses, misplaced = [], []
    for step in range(STEPS):
        tokens, labels = (t[dp_rank * half:(dp_rank + 1) * half] for t in data(step))
        if semantics:
            with ti.jax_semantics():
                loss = step_fn(tokens, labels)
        else:
            loss = step_fn(tokens, labels)
        misplaced += misplaced_gradients(model)
        opt.zero_grad()
        value = full(loss.detach()).reshape(()).clone()
        dist.all_reduce(value, group=dp_mesh.get_group())  # the global batch's loss
        losses.append((value / dp_mesh.size()).item())
    with torch.no_grad():
        weights = {n: full(p).detach().clone() for n, p in model.named_parameters()}
    if placements(model) != before:
        misplaced.append(f"parameters moved: {before} -> {placements(model)}")
    return {"losses": losses, "weights": weights, "placements_ok": not misplaced and bool(before),
            "misplaced": misplaced[:4], "meshes": meshes_of(model)}


def trained(base: Transformer, config: dict, ref: dict, semantics: bool) -> dict:
    result = train(base, config, semantics)
    return {**compare(result, ref), "meshes": result["meshes"]}


def plain_clip(base: Transformer) -> dict:
    """Plain DTensor's ``clip_grad_norm_`` over the sharded model's
    gradients (one on each parameter, made by parity's backward)."""
    model, dp_mesh = parallelize(base, {"fsdp": True})
    tokens, labels = (t[:BATCH // 2] for t in data(0))
    with ti.jax_semantics():
        F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten()).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    return {"norm": float(full(norm))}


def built_apart() -> dict:
    """A 1-D ``dp`` mesh over this rank's dp group, built from the group
    (no torch relation to the 2-D mesh): ``w * n`` and its gradient."""
    parent = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    group = parent["dp"].get_group()
    apart = DeviceMesh.from_group(group, "cpu", mesh=dist.get_process_group_ranks(group),
                                  mesh_dim_names=("dp",))
    g = torch.Generator().manual_seed(7)
    host_w, host_n = torch.randn(4, 4, generator=g), torch.randn(4, generator=g)
    w = distribute_tensor(host_w, parent, [Shard(0), Shard(1)])
    n = DTensor.from_local(host_n.chunk(2)[apart.get_local_rank()].clone(), apart, [Shard(0)],
                           run_check=False, shape=(4,), stride=(1,)).requires_grad_()
    with ti.jax_semantics():
        y = w * n
        (y * y).sum().backward()
    want_n = host_n.clone().requires_grad_()
    ((host_w * want_n) ** 2).sum().backward()
    return {"same_root": apart._get_root_mesh() is parent,
            "mesh": list(y.device_mesh.mesh_dim_names),
            "value_diff": (full(y) - host_w * host_n).abs().max().item(),
            "grad_mesh": list(n.grad.device_mesh.mesh_dim_names),
            "grad_placements": str(tuple(n.grad.placements)),
            "grad_diff": (full(n.grad) - want_n.grad).abs().max().item()}


def main() -> None:
    ti.initialize()
    results = {}
    torch.manual_seed(0)
    base = Transformer(model_args(False))
    ref = reference(base, {})
    for name in sys.argv[1:] or list(CONFIGS):
        config = CONFIGS[name]
        results[name] = {"parity": outcome(lambda: trained(base, config, ref, True), show=True)}
        torch._dynamo.reset()
        if name == "eager_foreach":
            results[name]["plain"] = outcome(lambda: trained(base, config, ref, False))
            results[name]["plain_clip"] = outcome(lambda: plain_clip(base))
        if ti.process_id() == 0:
            print(name, results[name], flush=True)
    results["built_apart"] = outcome(built_apart, show=True)
    report(results)


if __name__ == "__main__":
    main()
