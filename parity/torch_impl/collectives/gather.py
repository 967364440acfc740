"""The whole array on every rank with one collective.

A DTensor whose dims are split over several mesh axes would take one
all_gather per mesh axis through DTensor's ``redistribute`` (torch says so:
"2 sequential all_gather operations will be performed ... flatten mesh
dimensions"). Here every rank's block goes through a single all_gather over
the flattened group of the mesh axes that shard anything (torch's
``DeviceMesh._flatten``, created once per mesh and set of axes), and the
gathered blocks are put in place with one reshape and permute: block index
on a dim split over ``(a, b)`` is ``coord[a] * size[b] + coord[b]``, so the
gathered buffer, viewed as (sizes of those mesh axes in mesh order) +
block shape, needs only its axes reordered to (a, b, block dim) per dim.

The flattened mesh is kept out of the root mesh's ``_flatten_mapping``:
DTensor looks flattened meshes up there to merge a redistribute's
all_gathers, and torch asserts ("_StridedShard redistribute assumes no
flattened transforms") when it finds one for a redistribute that involves a
strided shard (a view of a dim split over two mesh axes makes one). It is
registered only for the duration of ``merged_redistribute``, and only when
neither side of that redistribute holds a strided shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.placement_types import Placement

from parity.torch_impl.collectives.donation import require_dtensor
from parity.torch_impl.collectives import flat_groups
from parity.torch_impl.collectives.blocks import all_gather_block
from parity.torch_impl.collectives.redistribute import resolve_pending
from parity.torch_impl.layouts.specs import evenly_sharded, mesh_axis_names, spec_of
from parity.torch_impl.runtime.torch_compat import StridedShard
from parity.torch_impl.layouts.tensors import result_spec

def sharding_mesh_dims(x: DTensor) -> tuple[int, ...]:
    """The mesh dims that split some dim of ``x``, in mesh order (those
    holding a shard, strided or not: the mesh axes its spec names)."""
    return tuple(m for m, p in enumerate(x.placements) if isinstance(p, (Shard, StridedShard)))


def _strided(placements: Sequence[Placement]) -> bool:
    return any(type(p).__name__ == "_StridedShard" for p in placements)


def merged_redistribute(x: DTensor, placements: Sequence[Placement]) -> DTensor:
    """``x.redistribute(x.device_mesh, placements)`` (differentiable), with
    the flattened mesh of the mesh dims that shard ``x`` visible to DTensor
    for that one call, so that it merges its all_gathers into one where it
    can (torch looks flattened meshes up by layout). Not when either side
    holds a strided shard: torch's merge asserts on those. Not while dynamo
    traces: creating a flattened mesh runs tensor ops on the mesh's rank
    tensor, which fail under fake tensors ("RuntimeError when making fake
    tensor call"); the traced graph then gathers one mesh dim at a time
    (same values and placements)."""
    dims = sharding_mesh_dims(x)
    placements = tuple(placements)
    if (len(dims) < 2 or _strided(x.placements) or _strided(placements)
            or torch.compiler.is_dynamo_compiling()):
        return x.redistribute(x.device_mesh, placements)
    with flat_groups.registered(x.device_mesh, dims):
        return x.redistribute(x.device_mesh, placements)


def gather_whole(x: DTensor) -> torch.Tensor:
    """The global array of ``x`` (no pending reduction) as a plain tensor on
    every rank (a ``LocalTensor`` of equal blocks when simulated), through
    at most one all_gather; an unevenly sharded ``x`` (a raw DTensor's) through
    DTensor's ``full_tensor``."""
    mesh_dims = sharding_mesh_dims(x)
    local = x._local_tensor.contiguous()
    if not mesh_dims:
        return local
    mesh = x.device_mesh
    spec = spec_of(x)  # LayoutError for strided shards no spec describes
    names = mesh_axis_names(mesh)
    if not evenly_sharded(x):
        return x.full_tensor()
    group = flat_groups.group(mesh, mesh_dims)
    gathered = all_gather_block(local.view(-1), 0, group)
    gathered = gathered.view(*(mesh.shape[m] for m in mesh_dims), *local.shape)
    order = []
    for dim, entry in enumerate(spec):
        order += [mesh_dims.index(names.index(a)) for a in entry]
        order.append(len(mesh_dims) + dim)
    return gathered.permute(order).reshape(x.shape)


class _GatherWhole(torch.autograd.Function):
    """``gather_whole`` as a replicated DTensor, differentiable: forward is
    one all_gather over the flattened group (DTensor's redistribute takes
    one per mesh axis for dims split out of mesh order, or over two dims);
    backward gives the gradient ``x``'s placements with DTensor's own
    redistribute (a local slice for a replicated gradient, a
    reduce-scatter for a pending one), as DTensor's Shard -> Replicate
    backward does."""

    @staticmethod
    def forward(ctx: Any, x: DTensor) -> DTensor:
        ctx.mesh, ctx.placements = x.device_mesh, tuple(x.placements)
        whole = gather_whole(x)
        spec = result_spec(x.device_mesh, ((),) * x.ndim, x.shape, x.dtype)
        return DTensor.__new__(DTensor, whole, spec, requires_grad=False)

    @staticmethod
    def backward(ctx: Any, grad: DTensor) -> DTensor:
        return grad.redistribute(ctx.mesh, ctx.placements)


def gather_whole_differentiable(x: DTensor) -> DTensor:
    """``x`` (evenly sharded, no pending reduction) replicated on its mesh
    through one all_gather, with a gradient back to ``x``'s placements."""
    return _GatherWhole.apply(x)


def all_gather_variable(x: Any) -> DTensor:
    """``x`` fully replicated on its mesh (pending reductions resolved).

    Raises ``ParityError`` when ``x`` is not a DTensor.
    """
    x = resolve_pending(require_dtensor(x, "all_gather_variable"))
    if not evenly_sharded(x):
        # DTensor's redistribute: differentiable, and it handles uneven blocks.
        return merged_redistribute(x, [Replicate()] * x.device_mesh.ndim)
    if x.requires_grad and torch.is_grad_enabled():
        return gather_whole_differentiable(x)  # one collective, gradient to x's placements
    whole = gather_whole(x)  # one collective over the flattened group
    spec = result_spec(x.device_mesh, ((),) * x.ndim, x.shape, x.dtype)
    return DTensor.__new__(DTensor, whole, spec, requires_grad=False)
