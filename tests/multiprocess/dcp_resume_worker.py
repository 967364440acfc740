"""Run under torchrun with 4 gloo ranks: resume training from a DCP
checkpoint in a new job (issue 23), optionally on another mesh.

``save <dir> <layout> [steps save_at]``: trains torch's test Transformer (as in
``torch_stack_worker.py``) for ``steps`` (default ``STEPS``) steps under
``jax_semantics()`` uninterrupted, recording the losses; then again from the
same start for ``save_at`` (default ``SAVE_AT``) steps and saves model and optimizer state with
``torch.distributed.checkpoint`` (``get_state_dict``: FSDP2's and TP's
DTensors as they are). ``load <dir> <layouts> [steps save_at]``: a new job builds the model
on each of the comma-separated ``layouts`` (``fsdp_tp``: FSDP2 over ``dp`` + TP over ``tp`` on (2, 2);
``tp``: TP over a 1-D mesh of 4), loads the checkpoint (DCP reshards), and
trains the remaining steps (one is enough to see Adam's restored state: its
moments and step count shape the first update after the resume). Rank 0 writes the losses to ``PARITY_RESULT_FILE``.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.tensor import DTensor
from torch.testing._internal.distributed._tensor.common_dtensor import Transformer

from parity import torch_impl as ti
from rank_result import report
from torch_stack_worker import BATCH, data, model_args, parallelize

STEPS, SAVE_AT = 4, 2


def build(layout: str):
    torch.manual_seed(0)
    base = Transformer(model_args(False))
    model, dp_mesh = parallelize(base, {"fsdp": layout == "fsdp_tp"})
    return model, dp_mesh, torch.optim.Adam(model.parameters(), lr=1e-2)


def step(model, opt, dp_mesh, i: int) -> float:
    tokens, labels = data(i)
    if dp_mesh is not None:
        half, r = BATCH // 2, dp_mesh.get_local_rank()
        tokens, labels = tokens[r * half:(r + 1) * half], labels[r * half:(r + 1) * half]
    with ti.jax_semantics():
        loss = F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
    value = loss.detach()
    value = (value.full_tensor() if isinstance(value, DTensor) else value).reshape(()).clone()
    if dp_mesh is not None:
        dist.all_reduce(value, group=dp_mesh.get_group())
        value = value / dp_mesh.size()
    return value.item()


def main() -> None:
    phase, path, layout = sys.argv[1:4]
    steps, save_at = (int(a) for a in sys.argv[4:6]) if len(sys.argv) > 4 else (STEPS, SAVE_AT)
    ti.initialize()
    results = {}
    if phase == "save":
        model, dp_mesh, opt = build(layout)
        results["uninterrupted"] = [step(model, opt, dp_mesh, i) for i in range(steps)]
        model, dp_mesh, opt = build(layout)
        results["before_save"] = [step(model, opt, dp_mesh, i) for i in range(save_at)]
        model_sd, optim_sd = get_state_dict(model, opt)
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)
    else:
        for one in layout.split(","):  # one job loads onto each layout in turn
            model, dp_mesh, opt = build(one)
            model_sd, optim_sd = get_state_dict(model, opt)
            state = {"model": model_sd, "optim": optim_sd}
            dcp.load(state, checkpoint_id=path)
            set_state_dict(model, opt, model_state_dict=state["model"],
                           optim_state_dict=state["optim"])
            results[one] = [step(model, opt, dp_mesh, i) for i in range(save_at, steps)]
    report(results)


if __name__ == "__main__":
    main()
