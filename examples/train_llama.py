"""Train a small Llama with FSDP2 + tensor parallelism + activation
checkpointing under parity's JAX semantics, resumable with DCP.

    torchrun --standalone --nproc_per_node=4 examples/train_llama.py --steps 6 --check
    torchrun --standalone --nproc_per_node=4 examples/train_llama.py --steps 3 \\
        --checkpoint-dir /tmp/llama-ckpt          # saves after the last step
    torchrun --standalone --nproc_per_node=4 examples/train_llama.py --steps 6 \\
        --checkpoint-dir /tmp/llama-ckpt --resume # continues from step 3

The model is Llama's: RMSNorm, rotary position embeddings (RoPE),
grouped-query attention (4 query heads share 2 key/value heads) and a SwiGLU
feed-forward. The mesh is (dp, tp) = (world / 2, 2) (8 ranks: (4, 2)):
torch's own ``parallelize_module`` plan shards attention and feed-forward
over ``tp`` (as torchtitan does), FSDP2's ``fully_shard`` shards every block
and the root over ``dp``, and ``torch.utils.checkpoint`` recomputes each
block in the backward. Each step runs under ``torch_impl.jax_semantics()``.
``--check`` trains the same model unsharded in every process and stops
with an error if a step's loss differs (relative 1e-5). ``--compile``
compiles each block's forward with ``torch.compile`` (see docs/torch-stack.md
for what compiles). Loss per step is printed by rank 0.
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


def parallelize(model: Llama, mesh, compile_blocks: bool) -> Llama:
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
        if compile_blocks:
            layer.compile()
        fully_shard(layer, mesh=dp)
    fully_shard(model, mesh=dp)
    model.checkpointing = True
    return model


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--checkpoint-dir", help="DCP directory: saved after the last step")
    parser.add_argument("--resume", action="store_true", help="load --checkpoint-dir first")
    parser.add_argument("--check", action="store_true",
                        help="train the unsharded model beside and require equal losses")
    parser.add_argument("--compile", action="store_true", help="torch.compile each block")
    args = parser.parse_args()
    if args.resume and not args.checkpoint_dir:
        parser.error("--resume needs --checkpoint-dir")

    ti.initialize()
    world, rank = dist.get_world_size(), dist.get_rank()
    if world % 2:
        raise SystemExit(f"train_llama.py needs an even number of ranks (tp=2), got {world}")
    mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
    dp = mesh["dp"]
    if BATCH % dp.size():
        raise SystemExit(f"the batch of {BATCH} does not split over dp={dp.size()}")

    torch.manual_seed(0)
    model = Llama()
    reference = copy.deepcopy(model) if args.check else None
    model = parallelize(model, mesh, args.compile)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
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
                tokens, labels = batch(step)
                F.cross_entropy(reference(tokens).flatten(0, 1), labels.flatten()).backward()
                ref_opt.step()
                ref_opt.zero_grad()

    half = BATCH // dp.size()
    lo = dp.get_local_rank() * half
    for step in range(start, args.steps):
        tokens, labels = batch(step)
        with ti.jax_semantics():
            logits = model(tokens[lo:lo + half])
            loss = F.cross_entropy(logits.flatten(0, 1), labels[lo:lo + half].flatten())
            loss.backward()
            opt.step()
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
            line += f" (unsharded {ref_loss.item():.6f})"
            if abs(value - ref_loss.item()) > 1e-5 * abs(ref_loss.item()):
                raise SystemExit(f"rank {rank}: {line}: differs from the unsharded model")
        if rank == 0:
            print(line, flush=True)

    if args.checkpoint_dir and not args.resume:
        model_sd, optim_sd = get_state_dict(model, opt)
        dcp.save({"model": model_sd, "optim": optim_sd,
                  "step": torch.tensor(args.steps, dtype=torch.int64)},
                 checkpoint_id=args.checkpoint_dir)
        if rank == 0:
            print(f"saved step {args.steps} to {args.checkpoint_dir}", flush=True)


if __name__ == "__main__":
    main()
