"""Run under torchrun with 4 gloo ranks: the whole training step of torch's
test Transformer (TP, or FSDP2 + TP) inside ``torch.compile``
(``aot_eager``) under ``jax_semantics()``: forward, cross-entropy,
backward, Adam. Rank 0 prints per configuration either the losses and the
largest weight difference from the unsharded model, or the error.
Configurations: ``tp``, ``fsdp_tp``, and each with ``_warm`` (parity
converts every parameter's mesh once, eagerly, before the compiled step).
A manual probe (docs/torch-stack.md, "Compiled steps"); not a CI test."""

from __future__ import annotations

import sys
import traceback

import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor
from torch.testing._internal.distributed._tensor.common_dtensor import Transformer

from parity import torch_impl as ti
from torch_stack_worker import BATCH, STEPS, data, full, model_args, parallelize, reference


def run(config: dict) -> str:
    torch.manual_seed(0)
    base = Transformer(model_args(False))
    ref = reference(base, {})
    model, dp_mesh = parallelize(base, config)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    if config.get("warm"):  # parity meets each parameter's mesh once, eagerly
        for p in model.parameters():
            if isinstance(p, DTensor):
                ti.to_parity_mesh(p.device_mesh)

    @torch.compile(backend="aot_eager")
    def step(tokens, labels):
        loss = F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    losses = []
    for i in range(STEPS):
        tokens, labels = data(i)
        if dp_mesh is not None:
            half, r = BATCH // 2, dp_mesh.get_local_rank()
            tokens, labels = tokens[r * half:(r + 1) * half], labels[r * half:(r + 1) * half]
        with ti.jax_semantics():
            loss = step(tokens, labels)
        losses.append(full(loss.detach()).item() if isinstance(loss, DTensor) else loss.item())
    diff = max((full(p).detach() - ref["weights"][n]).abs().max().item()
               for n, p in model.named_parameters())
    return f"ok losses {losses} (unsharded {ref['losses']}) weights {diff:.2e}"


def main() -> None:
    ti.initialize()
    for name in sys.argv[1:] or ["tp", "fsdp_tp"]:
        try:
            result = run({"fsdp": name.startswith("fsdp_tp"), "warm": name.endswith("_warm")})
        except Exception as err:  # noqa: BLE001 - the probe reports what fails
            lines = str(err).strip().splitlines()
            result = f"fails: {type(err).__name__}: {lines[0][:400] if lines else ''}"
            if ti.process_id() == 0:
                traceback.print_exc()
        if ti.process_id() == 0:
            print(f"COMPILED {name}: {result}", flush=True)
        torch._dynamo.reset()


if __name__ == "__main__":
    main()
