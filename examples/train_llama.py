"""Train a small Llama with FSDP2 + tensor parallelism + activation
checkpointing under parity's JAX semantics, resumable with DCP.

    torchrun --standalone --nproc_per_node=4 examples/train_llama.py --steps 6 --check
    torchrun --standalone --nproc_per_node=4 examples/train_llama.py --steps 3 \\
        --checkpoint-dir /tmp/llama-ckpt          # saves after the last step
    torchrun --standalone --nproc_per_node=4 examples/train_llama.py --steps 6 \\
        --checkpoint-dir /tmp/llama-ckpt --resume # continues from step 3
    torchrun --standalone --nproc_per_node=4 examples/train_llama.py --steps 2 --compile --check

The model is Llama's: RMSNorm, rotary position embeddings (RoPE),
grouped-query attention (4 query heads share 2 key/value heads) and a SwiGLU
feed-forward. The mesh is (dp, tp) = (world / 2, 2) (8 ranks: (4, 2); one
rank: (1, 1)): torch's own ``parallelize_module`` plan shards attention and
feed-forward over ``tp`` (as torchtitan does), FSDP2's ``fully_shard``
shards every block and the root over ``dp``, and ``torch.utils.checkpoint``
recomputes each block in the backward. Each step runs under
``torch_impl.jax_semantics()``.

Device: ``torch_impl.initialize()`` starts NCCL with one GPU per rank when
this node has a GPU for each of its ranks, else gloo on CPU (with more ranks
than GPUs it warns, and this script prints that it runs on CPU); the mesh,
the model and the batches live on that device.

``--check`` trains the same model unsharded in every process (eager, on the
same device) and stops with an error if a step's loss differs (relative
1e-5, the bound of the compiled stack tests: a float32 step differs from the
unsharded one by summation order only). ``--compile`` puts the whole
training step -- forward, cross-entropy, ``loss.backward()``, AdamW's step
-- in one ``torch.compile(backend="aot_eager", dynamic=False)``, as
``tests/test_compiled_stack.py`` compiles torch's stack: static shapes,
because FSDP2 + TP with dynamo's automatic dynamic shapes fails in torch's
own tracer (a ``RecursionError``: docs/torch-stack.md, "Compiled steps" 3.).
Dynamo compiles the step and the frames it reaches (the embedding, the
final norm and output layer, the loss, AdamW); FSDP2's hooks are
``torch.compiler.disable``d, so a checkpoint around an FSDP2-wrapped block
cannot become dynamo's checkpoint operator, and torch's checkpoint runs the
block and its recompute eagerly (checkpointing inside the block instead hits
an AOTAutograd failure of torch 2.13 with attention:
``tests/test_checkpoint_sdpa_upstream.py``). Rank 0 prints the loss per step
and, with ``--compile``, what dynamo compiled.
"""

from __future__ import annotations

import argparse
import copy
import math

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Replicate
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)
from torch.utils.checkpoint import checkpoint

from parity import torch_impl as ti

DIM, N_LAYERS, N_HEADS, N_KV_HEADS, HIDDEN, VOCAB, SEQ, BATCH = 32, 2, 4, 2, 64, 64, 16, 8


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(head_dim: int, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
    freqs = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(seq).float(), freqs)  # (seq, head_dim / 2)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (batch, seq, heads, head_dim); rotate each (even, odd) pair."""
    even, odd = x[..., 0::2], x[..., 1::2]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack((even * c - odd * s, even * s + odd * c), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head_dim = DIM // N_HEADS
        self.wq = nn.Linear(DIM, N_HEADS * self.head_dim, bias=False)
        self.wk = nn.Linear(DIM, N_KV_HEADS * self.head_dim, bias=False)
        self.wv = nn.Linear(DIM, N_KV_HEADS * self.head_dim, bias=False)
        self.wo = nn.Linear(N_HEADS * self.head_dim, DIM, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        # -1: the heads this rank holds (all of them unsharded, 1/tp under TP)
        q = self.wq(x).view(b, s, -1, self.head_dim)
        k = self.wk(x).view(b, s, -1, self.head_dim)
        v = self.wv(x).view(b, s, -1, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = q.shape[2] // k.shape[2]  # grouped-query attention: share each kv head
        k = k[:, :, :, None, :].expand(b, s, k.shape[2], rep, self.head_dim).flatten(2, 3)
        v = v[:, :, :, None, :].expand(b, s, v.shape[2], rep, self.head_dim).flatten(2, 3)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                             v.transpose(1, 2), is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w1 = nn.Linear(DIM, HIDDEN, bias=False)
        self.w3 = nn.Linear(DIM, HIDDEN, bias=False)
        self.w2 = nn.Linear(HIDDEN, DIM, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))  # SwiGLU


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention_norm, self.attention = RMSNorm(DIM), Attention()
        self.ffn_norm, self.feed_forward = RMSNorm(DIM), FeedForward()

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(N_LAYERS))
        self.norm = RMSNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)
        cos, sin = rope_tables(DIM // N_HEADS, SEQ)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.checkpointing = False
        for p in self.parameters():  # small weights: a loss that moves smoothly
            if p.dim() > 1:
                nn.init.normal_(p, std=1.0 / math.sqrt(p.shape[-1]))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            if self.checkpointing:
                h = checkpoint(layer, h, self.cos, self.sin, use_reentrant=False)
            else:
                h = layer(h, self.cos, self.sin)
        return self.output(self.norm(h)).float()


def parallelize(model: Llama, mesh) -> Llama:
    """TP over ``mesh["tp"]`` (torchtitan's plan), activation checkpointing,
    FSDP2 over ``mesh["dp"]``."""
    tp, dp = mesh["tp"], mesh["dp"]
    parallelize_module(model, tp, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
        "output": ColwiseParallel(output_layouts=Replicate()),
    })
    for layer in model.layers:
        parallelize_module(layer, tp, {
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(), "attention.wo": RowwiseParallel(),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(),
        })
        fully_shard(layer, mesh=dp)
    fully_shard(model, mesh=dp)
    model.checkpointing = True
    return model


def batch(step: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step``'s global batch (drawn on the CPU: the same on every
    device), on ``device``."""
    g = torch.Generator().manual_seed(1000 + step)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g).to(device)
    return tokens[:, :-1], tokens[:, 1:]


def device_and_mesh(world: int):
    """The device ``initialize()`` chose (a GPU of this rank's own under
    NCCL, else the CPU) and the (dp, tp) mesh on it."""
    device = (torch.device("cuda", torch.cuda.current_device()) if ti.device_type() == "cuda"
              else torch.device("cpu"))
    if device.type == "cpu" and torch.cuda.is_available() and dist.get_rank() == 0:
        print(f"train_llama.py: {world} ranks but {torch.cuda.device_count()} visible GPU(s) "
              "(NCCL needs one GPU per rank): running on CPU with gloo", flush=True)
    if world == 1:
        tp = 1
    elif world % 2:
        raise SystemExit(f"train_llama.py needs one rank or an even number of ranks (tp=2), "
                         f"got {world}")
    else:
        tp = 2
    mesh = init_device_mesh(device.type, (world // tp, tp), mesh_dim_names=("dp", "tp"))
    return device, mesh


def training_step(model: nn.Module, opt: torch.optim.Optimizer, compiled: bool):
    """Forward, cross-entropy, backward and the optimizer's step as one
    function of the batch; with ``compiled``, all of it in one
    ``torch.compile`` (``aot_eager``, static shapes: the module docstring)."""

    def step(tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten())
        loss.backward()
        opt.step()
        return loss

    return torch.compile(step, backend="aot_eager", dynamic=False) if compiled else step


def compile_summary(compiled_step) -> str:
    """What dynamo made of the compiled step on this rank: how many times
    the step's own frame compiled, the graphs in all (the step's, the frames
    it resumes in after a graph break, and those it calls), and the graph
    breaks by reason (first line of dynamo's explanation)."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    from torch._dynamo.utils import counters

    entries = len(_debug_get_cache_entry_list(compiled_step._torchdynamo_orig_callable.__code__))
    breaks: dict[str, int] = {}
    for reason, count in counters["graph_break"].items():
        first = reason.strip().splitlines()[0][:80] if reason.strip() else "?"
        breaks[first] = breaks.get(first, 0) + count
    listed = "; ".join(f"{count} x {reason}" for reason, count in sorted(breaks.items()))
    return (f"compiled: the step's frame {entries} time(s), "
            f"{counters['stats']['unique_graphs']} graphs in all, "
            f"{sum(breaks.values())} graph breaks ({listed})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--checkpoint-dir", help="DCP directory: saved after the last step")
    parser.add_argument("--resume", action="store_true", help="load --checkpoint-dir first")
    parser.add_argument("--check", action="store_true",
                        help="train the unsharded model beside and require equal losses")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the whole training step (aot_eager, dynamic=False)")
    args = parser.parse_args()
    if args.resume and not args.checkpoint_dir:
        parser.error("--resume needs --checkpoint-dir")

    ti.initialize()
    world, rank = dist.get_world_size(), dist.get_rank()
    device, mesh = device_and_mesh(world)
    dp = mesh["dp"]
    if BATCH % dp.size():
        raise SystemExit(f"the batch of {BATCH} does not split over dp={dp.size()}")
    if rank == 0:
        print(f"mesh (dp, tp) = {tuple(mesh.shape)} on {device.type} ({dist.get_backend()})"
              f"{', whole step compiled' if args.compile else ''}", flush=True)

    torch.manual_seed(0)
    model = Llama().to(device)
    reference = copy.deepcopy(model) if args.check else None
    model = parallelize(model, mesh)
    # foreach=True: torch's default on CUDA (one _foreach_* call over every parameter,
    # on FSDP2 + TP's two meshes); on the CPU torch would pick its per-parameter loop
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, foreach=True)
    train_step = training_step(model, opt, args.compile)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=args.lr) if args.check else None

    start = 0
    if args.resume:
        model_sd, optim_sd = get_state_dict(model, opt)
        state = {"model": model_sd, "optim": optim_sd, "step": torch.zeros((), dtype=torch.int64)}
        dcp.load(state, checkpoint_id=args.checkpoint_dir)
        set_state_dict(model, opt, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        start = int(state["step"])
        if args.check:  # the reference replays the steps the checkpoint holds
            for step in range(start):
                tokens, labels = batch(step, device)
                F.cross_entropy(reference(tokens).flatten(0, 1), labels.flatten()).backward()
                ref_opt.step()
                ref_opt.zero_grad()

    half = BATCH // dp.size()
    lo = dp.get_local_rank() * half
    for step in range(start, args.steps):
        tokens, labels = batch(step, device)
        with ti.jax_semantics():
            loss = train_step(tokens[lo:lo + half], labels[lo:lo + half])
            opt.zero_grad()
        value = loss.detach()
        value = (value.full_tensor() if isinstance(value, DTensor) else value).reshape(()).clone()
        dist.all_reduce(value, group=dp.get_group())
        value = value.item() / dp.size()
        line = f"step {step} loss {value:.6f}"
        if args.check:
            ref_loss = F.cross_entropy(reference(tokens).flatten(0, 1), labels.flatten())
            ref_loss.backward()
            ref_opt.step()
            ref_opt.zero_grad()
            rel = abs(value - ref_loss.item()) / abs(ref_loss.item())
            line += f" (unsharded {ref_loss.item():.6f}, rel {rel:.1e})"
            if rel > 1e-5:
                raise SystemExit(f"rank {rank}: {line}: differs from the unsharded model")
        if rank == 0:
            print(line, flush=True)
    if args.compile and rank == 0:
        print(compile_summary(train_step), flush=True)

    if args.checkpoint_dir and not args.resume:
        model_sd, optim_sd = get_state_dict(model, opt)
        dcp.save({"model": model_sd, "optim": optim_sd,
                  "step": torch.tensor(args.steps, dtype=torch.int64)},
                 checkpoint_id=args.checkpoint_dir)
        if rank == 0:
            print(f"saved step {args.steps} to {args.checkpoint_dir}", flush=True)


if __name__ == "__main__":
    main()
