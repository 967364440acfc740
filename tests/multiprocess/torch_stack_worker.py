"""Run under torchrun with 4 gloo ranks: torch's training stack as users
assemble it (issue 23), every configuration in one job.

torch's own test model and plan
(``torch.testing._internal.distributed._tensor.common_dtensor.Transformer``,
``ModelArgs(n_layers=2, dim=16, n_heads=4)``, ``Transformer.parallelize``),
Adam, 3 steps; each configuration runs under ``torch_impl.jax_semantics()``
and under plain DTensor, and is compared with the same model unsharded in
this process (same seed). Rank 0 writes, per configuration, parity's losses,
its largest weight difference from unsharded, whether every gradient had its
parameter's placement, and plain DTensor's outcome, to ``PARITY_RESULT_FILE``.
``tests/test_torch_stack.py`` asserts on them.

Configurations: ``tp`` (1-D mesh ``("tp",)`` of 4), ``sp`` (sequence
parallel), ``tp_clip_foreach`` (``clip_grad_norm_(1.0)``, Adam
``foreach=True``), ``tp_fused`` (Adam ``fused=True``), ``tp_inference``
(an ``inference_mode()`` forward after training), ``tp_checkpoint``
(``checkpoint(block, use_reentrant=False)`` around each block, the model's
own ``checkpoint_activations``), ``tp_checkpoint_reentrant``
(``checkpoint(block, use_reentrant=True)`` around each block, a wrapper
module applied to the unsharded reference too), ``tp_loss_parallel`` (the output layer
leaves logits sharded on the vocab and the loss runs in ``loss_parallel()``,
as torchtitan does), ``fsdp_tp`` (mesh (2, 2) ``("dp", "tp")``: TP over
``mesh["tp"]``, FSDP2 ``fully_shard`` over ``mesh["dp"]`` per block and at
the root, torchtitan's composition; each dp half of the batch on its ranks),
``tp_autocast`` (forward and loss under ``torch.autocast("cpu",
dtype=torch.bfloat16)``, the backward and Adam outside it, as torch's AMP
recipe has it; the unsharded reference under the same autocast).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F
from rank_result import report
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    loss_parallel,
    parallelize_module,
)
from torch.testing._internal.distributed._tensor.common_dtensor import (
    ModelArgs,
    Transformer,
)
from torch.utils.checkpoint import checkpoint

from parity import torch_impl as ti

STEPS = 3
BATCH, SEQ, VOCAB = 8, 8, 8


def model_args(checkpoint: bool, layers: int = 2) -> ModelArgs:
    # dropout off: the unsharded reference must see the same function
    return ModelArgs(n_layers=layers, dim=16, n_heads=4, vocab_size=VOCAB, max_seq_len=SEQ,
                     dropout_p=0.0, checkpoint_activations=checkpoint)


def data(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    return tokens, torch.roll(tokens, -1, dims=1)


def make_optimizer(params, kind: str):
    if kind == "fused":
        return torch.optim.Adam(params, lr=1e-2, fused=True)
    return torch.optim.Adam(params, lr=1e-2, foreach=(kind == "foreach"))


class ReentrantCheckpoint(torch.nn.Module):
    """``block`` run under ``checkpoint(..., use_reentrant=True)``: the
    reentrant form, which the model's own ``checkpoint_activations`` lacks."""

    def __init__(self, block: torch.nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.block, x, use_reentrant=True)


def with_checkpointing(model: Transformer, config: dict) -> Transformer:
    """Each block wrapped in a reentrant checkpoint when the config asks."""
    if config.get("checkpoint") == "reentrant":
        for i, layer in enumerate(model.layers):
            model.layers[i] = ReentrantCheckpoint(layer)
    return model


def full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t


def forward_scope(config: dict):
    """Where the forward and the loss run: bf16 autocast for ``tp_autocast``."""
    if config.get("autocast"):
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def reference(base: Transformer, config: dict) -> dict:
    """The unsharded model: losses per step, final weights, the inference output."""
    model = with_checkpointing(copy.deepcopy(base), config)
    opt = make_optimizer(model.parameters(), config.get("adam", "default"))
    losses = []
    for step in range(STEPS):
        tokens, labels = data(step)
        with forward_scope(config):
            loss = F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten())
        loss.backward()
        if config.get("clip"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    out = {"losses": losses, "weights": {n: p.detach().clone() for n, p in model.named_parameters()}}
    if config.get("inference"):
        with torch.inference_mode():
            out["inference"] = model(data(STEPS)[0]).clone()
    return out


def parallelize(base: Transformer, config: dict):
    model = copy.deepcopy(base)
    if config.get("fsdp"):
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        tp_mesh, dp_mesh = mesh["tp"], mesh["dp"]
    else:
        tp_mesh, dp_mesh = init_device_mesh("cpu", (4,), mesh_dim_names=("tp",)), None
    output = model.output
    if config.get("loss_parallel"):  # the plan's own output layer goes to a stand-in
        model.output = torch.nn.Linear(output.in_features, output.out_features, bias=False)
    Transformer.parallelize(model, tp_mesh, use_seq_parallel=config.get("sp", False))
    if config.get("loss_parallel"):
        # torchtitan's output plan: logits stay sharded over the vocab, tied
        # to the embedding (sharded over the vocab by the plan's RowwiseParallel)
        model.output = output
        parallelize_module(model.output, tp_mesh, ColwiseParallel(
            input_layouts=Replicate(), output_layouts=Shard(-1), use_local_output=False))
        model.output.weight = model.tok_embeddings.weight
    if dp_mesh is not None:
        for layer in model.layers:
            fully_shard(layer, mesh=dp_mesh)
        fully_shard(model, mesh=dp_mesh)
    return with_checkpointing(model, config), dp_mesh


def training_step(model, opt, config: dict):
    """One step (forward, loss, backward, optional clip, Adam) as a function
    of the batch; ``torch.compile``d whole when ``config["compile"]``
    (``aot_eager``, ``dynamic=config.get("dynamic")``)."""

    def step(tokens, labels):
        if config.get("loss_parallel"):
            logits = model(tokens)
            with loss_parallel():
                loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
                loss.backward()
        else:
            with forward_scope(config):
                loss = F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten())
            loss.backward()
        if config.get("clip"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    if config.get("compile"):
        return torch.compile(step, backend="aot_eager", dynamic=config.get("dynamic"))
    return step


def placements(model) -> dict:
    """Each DTensor parameter's placements, by name."""
    return {n: tuple(p.placements) for n, p in model.named_parameters() if isinstance(p, DTensor)}


def misplaced_gradients(model) -> list[str]:
    """The DTensor parameters whose gradient is not a DTensor of their placements."""
    return [f"{name}: {getattr(p.grad, 'placements', type(p.grad).__name__)} vs {p.placements}"
            for name, p in model.named_parameters()
            if isinstance(p, DTensor) and (not isinstance(p.grad, DTensor)
                                           or tuple(p.grad.placements) != tuple(p.placements))]


def train(base: Transformer, config: dict, semantics: bool) -> dict:
    model, dp_mesh = parallelize(base, config)
    scope = ti.jax_semantics if semantics else contextlib.nullcontext
    opt = make_optimizer(model.parameters(), config.get("adam", "default"))
    step_fn = training_step(model, opt, config)
    before = placements(model)
    dp_rank = dp_mesh.get_local_rank() if dp_mesh is not None else 0
    losses, misplaced = [], []
    for step in range(STEPS):
        tokens, labels = data(step)
        if dp_mesh is not None:  # each dp half of the batch on its ranks
            half = BATCH // 2
            tokens, labels = (t[dp_rank * half:(dp_rank + 1) * half] for t in (tokens, labels))
        with scope():
            loss = step_fn(tokens, labels)
        misplaced += misplaced_gradients(model)
        opt.zero_grad()
        value = full(loss.detach()).reshape(())
        if dp_mesh is not None:  # the global batch's loss: the mean of the halves
            value = value.clone()
            dist.all_reduce(value, group=dp_mesh.get_group())
            value = value / dp_mesh.size()
        losses.append(value.item())
    with torch.no_grad():
        weights = {n: full(p).detach().clone() for n, p in model.named_parameters()}
    if placements(model) != before:
        misplaced.append(f"parameters moved: {before} -> {placements(model)}")
    out = {"losses": losses, "weights": weights, "placements_ok": not misplaced and bool(before),
           "misplaced": misplaced[:4]}
    if config.get("inference"):
        forward = (torch.compile(model, backend="aot_eager", dynamic=config.get("dynamic"))
                   if config.get("compile") else model)
        with scope(), torch.inference_mode():
            out["inference"] = full(forward(data(STEPS)[0])).clone()
    return out


def differences(result: dict, ref: dict) -> tuple[float, float]:
    """(largest relative loss difference over the steps, largest weight difference)."""
    diff = max((result["weights"][n] - w).abs().max().item() for n, w in ref["weights"].items())
    loss_rel = max(abs(a - b) / abs(b) for a, b in zip(result["losses"], ref["losses"]))
    return loss_rel, diff


def compare(result: dict, ref: dict) -> dict:
    loss_rel, diff = differences(result, ref)
    out = {"losses": result["losses"], "ref_losses": ref["losses"], "loss_rel": loss_rel,
           "weight_diff": diff, "placements_ok": result["placements_ok"],
           "misplaced": result["misplaced"]}
    if "inference" in ref:
        out["inference_diff"] = (result["inference"] - ref["inference"]).abs().max().item()
    if "dtype_effect" in ref:
        out["dtype_loss_rel"], out["dtype_weight_diff"] = ref["dtype_effect"]
    return out


def trained_and_compared(base: Transformer, config: dict, ref: dict, semantics: bool) -> dict:
    return compare(train(base, config, semantics), ref)


def outcome(fn, show: bool = False) -> dict:
    """``fn()``'s result, or its error described; rank 0 prints the traceback when ``show``."""
    try:
        return {"ok": True, **fn()}
    except Exception as err:  # noqa: BLE001 - recorded: plain DTensor's failures are data
        if show and ti.process_id() == 0:
            traceback.print_exc()
        return {"ok": False, "error": describe(err),
                "where": traceback.format_exc().strip().splitlines()[-3][:200]}


def describe(err: BaseException) -> str:
    """``Type: first line`` of ``err``, and of the exception at the root of the
    chain it wraps (dynamo's ``BackendCompilerFailed`` and ``TorchRuntimeError``
    say only which backend or which fake-tensor call raised)."""

    def line(e: BaseException) -> str:
        lines = str(e).strip().splitlines()
        return f"{type(e).__name__}: {lines[0][:300] if lines else ''}"

    root, seen = err, {id(err)}
    while True:
        inner = getattr(root, "inner_exception", None) or root.__cause__ or root.__context__
        if inner is None or id(inner) in seen:
            break
        root = inner
        seen.add(id(root))
    return line(err) if root is err else f"{line(err)} <- {line(root)}"


CONFIGS = {
    "tp": {},
    "sp": {"sp": True},
    "tp_clip_foreach": {"clip": True, "adam": "foreach"},
    "tp_fused": {"adam": "fused"},
    "tp_inference": {"inference": True},
    "tp_checkpoint": {"checkpoint": True},
    "tp_checkpoint_reentrant": {"checkpoint": "reentrant"},
    "tp_loss_parallel": {"loss_parallel": True},
    "fsdp_tp": {"fsdp": True},
    "tp_autocast": {"autocast": True},
}


def run_configurations(configs: dict, names: list[str],
                       plain: tuple[str, ...] | None = None) -> dict:
    """Each named configuration under parity, and under plain DTensor where
    ``plain`` names it (``None``: everywhere), against the unsharded model;
    rank 0 prints each outcome as it lands. A configuration's ``layers`` (2
    unless it says) sets the model's depth."""
    results = {}
    for name in names:
        config = configs[name]
        torch.manual_seed(0)
        base = Transformer(model_args(config.get("checkpoint") is True, config.get("layers", 2)))
        ref = reference(base, config)
        if config.get("autocast"):
            # What bf16 itself does to the unsharded model (against float32):
            # the scale of rounding the sharded run is held to.
            ref["dtype_effect"] = differences(ref, reference(base, {}))
        start = time.perf_counter()
        parity_outcome = outcome(functools.partial(trained_and_compared, base, config, ref, True),
                                 show=True)
        seconds = time.perf_counter() - start
        torch._dynamo.reset()
        results[name] = {"parity": parity_outcome, "seconds": round(seconds, 1)}
        if plain is None or name in plain:
            results[name]["plain"] = outcome(functools.partial(trained_and_compared, base, config,
                                                               ref, False))
            torch._dynamo.reset()
        if ti.process_id() == 0:
            print(name, results[name], flush=True)
    return results


def main() -> None:
    ti.initialize()
    report(run_configurations(CONFIGS, sys.argv[1:] or list(CONFIGS)))


if __name__ == "__main__":
    main()
