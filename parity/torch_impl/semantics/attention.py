"""``scaled_dot_product_attention`` on each rank's block.

Attention is independent per (batch, head): JAX partitions
``nn.dot_product_attention`` by keeping the batch and head dims sharded,
gathering the dims it contracts (the key/value sequence and the query/key
feature dim) and keeping the query sequence and the value feature dim
sharded where they are. Every JAX answer for a layout that mixes these is
auto mode's choice (explicit mode calls it ambiguous). Parity does the same
with no DTensor strategy at all: it lays the operands out that way
(differentiable ``redistribute``), runs torch's own kernel on each rank's
block and wraps the blocks as the output.

Why not DTensor: torch 2.13 has no sharding strategy for the CPU attention
kernels and propagates one through the op's decomposition, which takes
tens of seconds per call on a (2, 4) mesh and then fails for a sharded head
dim ("Q/K/V should have the same head size").

Spec of the output ``(B, H, L, Ev)``, per dim the first of query, key,
value whose axes are not taken yet (Ev: the value's): batch, then heads
(when both head counts divide: grouped-query attention keeps each group on
its rank), then the query sequence (gathered under ``is_causal``: the
causal mask needs global positions), then Ev. A mask is laid out to match
the block (its broadcast dims replicated).

Calls this does not cover (``dropout_p > 0``: each rank would draw its own
mask; operands that are not 4-D; no DTensor operand) return ``None`` and
run the usual way.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor, Partial, Replicate

from parity.torch_impl.layouts import meshes
from parity.torch_impl.semantics import pending
from parity.torch_impl.collectives import redistribute
from parity.torch_impl.layouts import specs as S
from parity.torch_impl.layouts.tensors import contiguous_stride

_NAMES = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def run_attention(args: tuple, kwargs: dict) -> Any:
    """``F.scaled_dot_product_attention(*args, **kwargs)`` on each rank's
    block, or ``None`` for a call form left to the usual path (see the
    module docstring)."""
    call = dict(zip(_NAMES, args))
    if set(call) & set(kwargs):
        return None  # an argument given twice: let torch raise its own error
    call.update(kwargs)
    q, k, v = call.get("query"), call.get("key"), call.get("value")
    mask = call.get("attn_mask")
    if any(not isinstance(t, torch.Tensor) or t.ndim != 4 for t in (q, k, v)):
        return None
    if float(call.get("dropout_p", 0.0) or 0.0) != 0.0:
        return None
    dtensors = [t for t in (q, k, v, mask) if isinstance(t, DTensor)]
    if not dtensors:
        return None
    mesh = dtensors[0].device_mesh
    if any(t.device_mesh != mesh for t in dtensors):
        return None  # two meshes: the usual path raises parity's mesh error
    q, k, v = (_on_mesh(t, mesh) for t in (q, k, v))
    causal = bool(call.get("is_causal", False))
    out_spec = _output_spec(q, k, v, S.axis_sizes(mesh), causal)
    b, h, l, ev = out_spec
    q_local = _block(q, (b, h, l, ()), out_spec)
    k_local = _block(k, (b, h, (), ()), out_spec)
    v_local = _block(v, (b, h, (), ev), out_spec)
    rest = {name: call[name] for name in ("is_causal", "scale", "enable_gqa") if name in call}
    if mask is not None:
        rest["attn_mask"] = _mask_block(_on_mesh(mask, mesh), out_spec)
    local = F.scaled_dot_product_attention(q_local, k_local, v_local, **rest)
    shape = (q.shape[0], q.shape[1], q.shape[2], v.shape[3])
    # The blocks wrapped on the operands' own torch mesh: no parity mesh or
    # layout object, which dynamo would trace into (a graph break in
    # TensorLayout under torch.compile).
    return DTensor.from_local(local, mesh, S.placements_for(tuple(out_spec), mesh),
                              run_check=False, shape=torch.Size(shape),
                              stride=contiguous_stride(shape))


def _on_mesh(t: torch.Tensor, mesh) -> DTensor:
    """A DTensor operand with its pending sums completed; a plain one as a
    replicated DTensor on ``mesh`` (differentiable)."""
    if isinstance(t, DTensor):
        return pending.complete(t)
    return DTensor.from_local(t, mesh, [Replicate()] * mesh.ndim, run_check=False,
                              shape=t.shape, stride=t.stride())


def _output_spec(q: DTensor, k: DTensor, v: DTensor, sizes: dict, causal: bool) -> tuple:
    used: set = set()

    def pick(candidates, extents) -> tuple:
        for axes in candidates:
            axes = tuple(axes)
            if not axes or used & set(axes):
                continue
            shards = 1
            for a in axes:
                shards *= sizes[a]
            if all(n % shards == 0 for n in extents):
                used.update(axes)
                return axes
        return ()

    qs, ks, vs = S.spec_of(q), S.spec_of(k), S.spec_of(v)
    batch = pick((qs[0], ks[0], vs[0]), (q.shape[0],))
    heads = pick((qs[1], ks[1], vs[1]), (q.shape[1], k.shape[1]))
    query_seq = () if causal else pick((qs[2],), (q.shape[2],))
    value_dim = pick((vs[3],), (v.shape[3],))
    return (batch, heads, query_seq, value_dim)


def _block(x: DTensor, spec: tuple, out_spec: tuple) -> torch.Tensor:
    """Each rank's block of ``x`` laid out as ``spec`` (differentiable).

    The gradient that comes back to a block is a partial sum over every mesh
    axis that splits the output but not ``x`` (ranks along it computed
    different output blocks from the same copy of ``x``): the block says so
    (``Partial``), and DTensor sums it on the way back to ``x``.
    """
    x = redistribute.redistribute_to(x, spec)
    mine = {a for axes in spec for a in axes}
    split = {a for axes in out_spec for a in axes} - mine
    names = meshes.mesh_axis_names(x.device_mesh)
    grad_placements = [Partial() if name in split else p for name, p in zip(names, x.placements)]
    return x.to_local(grad_placements=grad_placements)


def _mask_block(mask: DTensor, out_spec: tuple) -> torch.Tensor:
    """The mask laid out as the (B, H, L, S) block of each rank: aligned
    from the right, size-1 (broadcast) dims replicated, S gathered."""
    b, h, l, _ = out_spec
    full = (b, h, l, ())[4 - mask.ndim:]
    spec = tuple(axes if n != 1 else () for axes, n in zip(full, mask.shape))
    return _block(mask, spec, out_spec)
