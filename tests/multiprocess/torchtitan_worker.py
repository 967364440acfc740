"""Run under torchrun with 4 gloo ranks: torchtitan 0.3.0's llama3 debug
model, parallelised by its own ``parallelize_llama``, one configuration per
launch (``argv[1]``), under parity's ``jax_semantics()`` and under plain
DTensor, against the same model unsharded in this process.

The pieces are torchtitan's, put together as its ``Trainer`` puts them
together (its trainer module itself pulls tensorboard, wandb and datasets,
so the few lines that join them are repeated here): the ``debugmodel``
config (6 layers, dim 256, fused QKV, RoPE, SwiGLU), ``update_from_config``'s
sharding declarations and RoPE length, a meta-device build,
``parallelize_llama``, ``init_weights``, ``ChunkedLossWrapper`` around its
``CrossEntropyLoss`` (the model skips ``lm_head``; the loss applies it per
chunk), the ``default_adamw`` optimizer container (fused AdamW), the
warmup/decay LR schedule, its ``clip_grad_norm_`` and its loss
normalisation (sum over tokens / global valid tokens, summed over dp).

What a CPU needs: the import-only triton stub (``tests/torchtitan_support``),
torchtitan's device type set to "cpu" (it falls back to "cuda"), SDPA in
place of flex attention (no flex backward on CPU; torchtitan's own
graph_trainer tests swap it the same way), FSDP2's sum-only reductions
(gloo has no ``PREMUL_SUM``; same values) and fp32 FSDP params, and the
reference's weights copied into the sharded parameters block by block
(torch's ``set_model_state_dict`` fails on the ``_StridedShard`` weights).

Configurations: ``tp`` (tp 4), ``fsdp_tp`` (dp 2 x tp 2), each also with
full activation checkpointing (``_ac``), and ``tp_compile`` (per-block
``torch.compile``, aot_eager, fullgraph=True, no AC). Synthetic tokens,
3 steps, batch 4 x seq 32. ``argv[2]`` picks torchtitan's SPMD backend:
``partial_dtensor`` (default here; DTensor for TP, FSDP2 for dp),
``full_dtensor`` or ``spmd_types`` (torchtitan's default; its parameters are
local blocks, so it is initialised before parallelize and compared on
losses only), each with the trainer's own input handling; ``argv[3]``
(``plain`` or ``parity``) runs one side only (the two non-default backends
cannot build a second model in one process: torch's ``fully_shard`` then
finds parameters on another mesh object). Rank 0 writes
``{"config": name, "backend": ..., "parity": ..., "plain": ...}`` to
``PARITY_RESULT_FILE``: each the losses, the unsharded losses, the largest
relative loss difference and weight difference, or the error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, distribute_tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "torchtitan_support"))
from titan_loader import import_torchtitan, use_cpu  # noqa: E402

from parity import torch_impl as ti  # noqa: E402

STEPS = 3
BATCH, SEQ = 4, 32  # global batch; SEQ / tp must stay divisible by the loss's 8 chunks
SEED = 0

CONFIGS = {
    "tp": {"tp": 4},
    "tp_ac": {"tp": 4, "ac": True},
    "fsdp_tp": {"tp": 2, "dp": 2},
    "fsdp_tp_ac": {"tp": 2, "dp": 2, "ac": True},
    "tp_compile": {"tp": 4, "compile": True},
}

tt = import_torchtitan()
use_cpu()

from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss  # noqa: E402
from torchtitan.components.optimizer import default_adamw  # noqa: E402
from torchtitan.components.optimizer.lr_scheduler import LRSchedulersContainer  # noqa: E402
from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig  # noqa: E402
from torchtitan.distributed import ParallelDims  # noqa: E402
from torchtitan.distributed import full_dtensor  # noqa: E402
from torchtitan.distributed import utils as dist_utils  # noqa: E402
from torchtitan.distributed.activation_checkpoint import FullAC  # noqa: E402
from torchtitan.distributed.spmd_types import annotate_input_spmd_types  # noqa: E402
from torchtitan.models.common.attention import ScaledDotProductAttention  # noqa: E402
from torchtitan.models.llama3 import model_registry  # noqa: E402
from torchtitan.models.llama3.sharding import set_llama3_sharding_config  # noqa: E402


def trainer_pieces(config: dict, spmd_backend: str = "partial_dtensor"):
    """The debug model's config and the trainer's configs for ``config``."""
    spec = model_registry("debugmodel")
    model_config = spec.model
    for layer in model_config.layers:  # no flex backward on CPU
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    parallelism = ParallelismConfig(
        tensor_parallel_degree=config.get("tp", 1),
        data_parallel_shard_degree=config.get("dp", 1),
        spmd_backend=spmd_backend,
    )
    training = TrainingConfig(local_batch_size=BATCH // config.get("dp", 1), seq_len=SEQ,
                              steps=STEPS, mixed_precision_param="float32")
    # Llama3Model.Config.update_from_config, without importing the trainer
    set_llama3_sharding_config(model_config, enable_sp=parallelism.enable_sequence_parallel)
    for layer in model_config.layers:
        layer.attention.rope = dataclasses.replace(layer.attention.rope, max_seq_len=SEQ)
    compile_config = CompileConfig(enable=bool(config.get("compile")), components=["model"],
                                   backend="aot_eager")
    ac = FullAC.Config() if config.get("ac") else None
    return spec, model_config, parallelism, training, compile_config, ac


def trainer_inputs(dims, spmd_backend: str, tokens: torch.Tensor, labels: torch.Tensor):
    """The trainer's ``post_dataloading_process`` for the backend: DTensors
    for ``full_dtensor``, SPMD type annotations for ``spmd_types``."""
    if spmd_backend == "full_dtensor":
        return full_dtensor.parallelize_inputs(dims, tokens, labels, {})
    if spmd_backend == "spmd_types":
        return annotate_input_spmd_types(dims, tokens, labels, {})
    return tokens, labels, {}


def loss_and_optimizer(spec, model):
    loss_fn = ChunkedLossWrapper.Config(
        loss_fn=CrossEntropyLoss.Config(global_vocab_size=spec.model.vocab_size)).build()
    loss_fn.set_lm_head(model.lm_head)
    model._skip_lm_head = True
    optimizers = default_adamw(lr=8e-4).build(model_parts=[model])
    schedulers = LRSchedulersContainer.Config(
        warmup_steps=2, decay_ratio=0.8, decay_type="linear", min_lr_factor=0.0,
    ).build(optimizers=optimizers, training_steps=STEPS)
    return loss_fn, optimizers, schedulers


def data(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    tokens = torch.randint(0, 2048, (BATCH, SEQ + 1), generator=g)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def build(model_config):
    with torch.device("meta"):
        return model_config.build()


def reference(config: dict) -> dict:
    """The unsharded model in this process: losses and final weights."""
    spec, model_config, *_ = trainer_pieces(config)
    model = build(model_config)
    model.to_empty(device="cpu")
    torch.manual_seed(SEED)
    with torch.no_grad():
        model.init_weights(buffer_device=None)
    model.train()
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    loss_fn, optimizers, schedulers = loss_and_optimizer(spec, model)
    losses = []
    for step in range(STEPS):
        tokens, labels = data(step)
        optimizers.zero_grad()
        loss, _ = loss_fn(model(tokens), labels, torch.tensor(labels.numel()))
        loss.backward()
        dist_utils.clip_grad_norm_(list(model.parameters()), 1.0, foreach=True)
        optimizers.step()
        schedulers.step()
        losses.append(loss.item())
    return {"losses": losses, "initial": initial,
            "weights": {n: p.detach().clone() for n, p in model.named_parameters()}}


def load_weights(model, initial: dict) -> None:
    """Each sharded parameter's local block, cut from the reference's weights."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            full = initial[name.replace("._checkpoint_wrapped_module", "")
                           .replace("._orig_mod", "")]
            if isinstance(p, DTensor):
                p.to_local().copy_(distribute_tensor(full, p.device_mesh, p.placements).to_local())
            else:
                p.copy_(full)


def sharded(config: dict, ref: dict, semantics: bool, spmd_backend: str) -> dict:
    """``config`` on 4 ranks: parallelize_llama, 3 steps, losses and weights."""
    spec, model_config, parallelism, training, compile_config, ac = trainer_pieces(
        config, spmd_backend)
    world = dist.get_world_size()
    dims = ParallelDims.from_config(parallelism, world)
    dims.build_mesh()
    dist_utils.set_spmd_backend(spmd_backend)
    if spmd_backend == "spmd_types":
        # its parameters are plain local blocks: initialise the model as the
        # reference is initialised, then let parallelize cut the blocks
        model = build(model_config)
        model.to_empty(device="cpu")
        torch.manual_seed(SEED)
        with torch.no_grad():
            model.init_weights(buffer_device=None)
    else:
        model = build(model_config)
    model = spec.parallelize_fn(model, parallel_dims=dims, training=training,
                                parallelism=parallelism, compile_config=compile_config,
                                ac_config=ac, dump_folder="")
    if spmd_backend != "spmd_types":
        model.to_empty(device="cpu")
        with torch.no_grad():
            model.init_weights(buffer_device=None)  # buffers (RoPE); weights come next
        load_weights(model, ref["initial"])
    model.train()
    for module in model.modules():  # gloo has no PREMUL_SUM
        if hasattr(module, "set_force_sum_reduction_for_comms"):
            module.set_force_sum_reduction_for_comms(True)
    loss_fn, optimizers, schedulers = loss_and_optimizer(spec, model)
    context = dist_utils.get_spmd_context(parallel_dims=dims)
    if dims.dp_enabled:
        batch_mesh = dims.get_mesh("batch")
        dp_size, dp_rank = batch_mesh.size(), batch_mesh.get_local_rank()
    else:
        batch_mesh, dp_size, dp_rank = None, 1, 0
    scope = ti.jax_semantics if semantics else contextlib.nullcontext
    losses = []
    for step in range(STEPS):
        tokens, labels = data(step)
        global_tokens = torch.tensor(labels.numel())
        rows = slice(dp_rank * BATCH // dp_size, (dp_rank + 1) * BATCH // dp_size)
        tokens, labels = tokens[rows].contiguous(), labels[rows].contiguous()
        optimizers.zero_grad()
        with scope(), context():
            tokens, labels, _ = trainer_inputs(dims, spmd_backend, tokens, labels)
            loss, _ = loss_fn(model(tokens), labels, global_tokens)
            loss.backward()
        with scope():
            dist_utils.clip_grad_norm_(list(model.parameters()), 1.0, foreach=True)
            optimizers.step()
        schedulers.step()
        value = loss.detach()
        over_dp = isinstance(value, DTensor) and batch_mesh is not None and set(
            batch_mesh.mesh_dim_names) <= set(value.device_mesh.mesh_dim_names)
        value = value.full_tensor() if isinstance(value, DTensor) else value
        if batch_mesh is not None and not over_dp:  # local sum / global tokens, summed over dp
            value = dist_utils.dist_sum(value, batch_mesh)
        losses.append(float(value))
    if spmd_backend == "spmd_types":  # local blocks: losses only
        return {"losses": losses, "weights": None}
    with torch.no_grad():
        weights = {n.replace("._checkpoint_wrapped_module", "").replace("._orig_mod", ""):
                   (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
                   for n, p in model.named_parameters()}
    return {"losses": losses, "weights": weights}


def compare(result: dict, ref: dict) -> dict:
    loss_rel = max(abs(a - b) / abs(b) for a, b in zip(result["losses"], ref["losses"]))
    diff = (None if result["weights"] is None else
            max((result["weights"][n] - w).abs().max().item() for n, w in ref["weights"].items()))
    return {"ok": True, "losses": result["losses"], "ref_losses": ref["losses"],
            "loss_rel": loss_rel, "weight_diff": diff}


def describe(err: BaseException) -> str:
    """``Type: first line`` of ``err``, and of the exception at the root of
    the chain it wraps (dynamo's ``Unsupported: Observed exception`` says
    only that the traced code raised)."""

    def line(e: BaseException) -> str:
        lines = str(e).strip().splitlines()
        return f"{type(e).__name__}: {lines[0][:300] if lines else ''}"

    root, seen = err, {id(err)}
    while True:
        inner = root.__cause__ or root.__context__
        if inner is None or id(inner) in seen:
            break
        root = inner
        seen.add(id(root))
    return line(err) if root is err else f"{line(err)} <- {line(root)}"


def outcome(config: dict, ref: dict, semantics: bool, spmd_backend: str) -> dict:
    start = time.perf_counter()
    try:
        out = compare(sharded(config, ref, semantics, spmd_backend), ref)
    except Exception as err:  # noqa: BLE001 - recorded: the error is the result
        if dist.get_rank() == 0:
            traceback.print_exc()
        out = {"ok": False, "error": describe(err),
               "where": traceback.format_exc().strip().splitlines()[-3][:300]}
    torch._dynamo.reset()
    out["seconds"] = round(time.perf_counter() - start, 1)
    return out


def main() -> None:
    name = sys.argv[1]
    backend = sys.argv[2] if len(sys.argv) > 2 else "partial_dtensor"
    sides = (sys.argv[3],) if len(sys.argv) > 3 else ("plain", "parity")
    config = CONFIGS[name]
    ti.initialize()
    ref = reference(config)
    results = {"config": name, "backend": backend}
    for side in sides:
        results[side] = outcome(config, ref, side == "parity", backend)
    if dist.get_rank() == 0:
        with open(os.environ["PARITY_RESULT_FILE"], "w") as f:
            json.dump(results, f)
        print(json.dumps(results), flush=True)
    print(f"rank {dist.get_rank()}: ok", flush=True)


if __name__ == "__main__":
    main()
