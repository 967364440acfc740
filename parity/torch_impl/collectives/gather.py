"""Replicating a DTensor, and redistributes that gather, with one collective.

``all_gather_variable`` replicates through ``whole.gather_whole`` (one
all_gather over the flattened group of the mesh axes that shard anything);
``merged_redistribute`` lets DTensor merge a redistribute's per-axis
all_gathers into one, and a redistribute with a strided shard that would
gather on several mesh axes goes through the whole array
(``strided_reshard``).

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
from torch.distributed.tensor import DTensor, Replicate
from torch.distributed.tensor.placement_types import Placement

from parity.torch_impl.collectives.donation import require_dtensor
from parity.torch_impl.collectives import flat_groups, strided_reshard
from parity.torch_impl.collectives.redistribute import resolve_pending
from parity.torch_impl.collectives.whole import evenly_sharded, gather_whole, sharding_mesh_dims
from parity.torch_impl.layouts.tensors import result_spec


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
    (same values and placements). A strided redistribute that gathers on
    several mesh axes: one all_gather of the whole array
    (``strided_reshard``)."""
    dims = sharding_mesh_dims(x)
    placements = tuple(placements)
    if strided_reshard.applies(x, placements):
        return strided_reshard.reshard(x, placements)
    if (len(dims) < 2 or _strided(x.placements) or _strided(placements)
            or torch.compiler.is_dynamo_compiling()):
        return x.redistribute(x.device_mesh, placements)
    with flat_groups.registered(x.device_mesh, dims):
        return x.redistribute(x.device_mesh, placements)


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
