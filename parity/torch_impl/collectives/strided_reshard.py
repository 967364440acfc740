"""A redistribute with a strided shard, in one collective.

A dim split over several mesh axes out of mesh order holds a strided shard
(``_StridedShard``). DTensor cannot merge the all_gathers of a redistribute
that involves one (torch asserts when it finds a flattened mesh for it), so
it gathers one mesh axis at a time and logs "While redistributing from
(_StridedShard(dim=0, sf=4), Shard(dim=0)) to (Shard(dim=0), Replicate()), 2
sequential all_gather operations will be performed" into the user's output.

Here such a redistribute that gathers on two or more mesh axes
(``gathered_mesh_dims``) takes the whole array with one all_gather over the
flattened group of ``x``'s sharding axes (``whole.gather_whole``) and cuts
the target's blocks out of it locally (a replicated DTensor laid out as the
target: a local slice, no communication). The bytes moved are the whole
array's, as DTensor's sequential gathers of those axes move; where some
sharding axis would have stayed in place it moves more, in one launch.
Backward is the same reshard of the gradient back to ``x``'s placements.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor.placement_types import Placement

from parity.torch_impl.collectives.whole import evenly_sharded, gather_whole
from parity.torch_impl.layouts.specs import describable
from parity.torch_impl.runtime.torch_compat import StridedShard


def gathered_mesh_dims(current: Sequence[Placement], target: Sequence[Placement]
                       ) -> tuple[int, ...]:
    """The mesh dims a redistribute from ``current`` to ``target`` gathers
    on, counted generously: every mesh dim that shards a tensor dim whose
    split changes -- a mesh dim's shard of it removed, moved or added (the
    shards of one dim nest, so changing one undoes the others). Pure; mesh
    order."""
    def dim_of(p: Placement) -> int | None:
        return p.dim if isinstance(p, (Shard, StridedShard)) else None

    changed = {dim_of(p) for m, (c, t) in enumerate(zip(current, target)) if c != t
               for p in (c, t)} - {None}
    return tuple(m for m, p in enumerate(current) if dim_of(p) in changed)


def _strided(placements: Sequence[Placement]) -> bool:
    return any(type(p) is StridedShard for p in placements)


def applies(x: DTensor, placements: Sequence[Placement]) -> bool:
    """Whether ``x`` to ``placements`` is a redistribute this module takes
    in one collective: a strided shard on either side, two or more mesh
    dims gathered, no pending value on either side, ``x`` evenly sharded
    and described by a spec, and not while dynamo traces (a flattened group
    cannot be created under fake tensors)."""
    current, placements = tuple(x.placements), tuple(placements)
    if not (_strided(current) or _strided(placements)) or current == placements:
        return False
    if any(isinstance(p, Partial) for p in current + placements):
        return False
    if torch.compiler.is_dynamo_compiling() or len(gathered_mesh_dims(current, placements)) < 2:
        return False
    return describable(x) and evenly_sharded(x)


def _through_the_whole(x: DTensor, placements: tuple) -> DTensor:
    whole = gather_whole(x)
    replicated = DTensor.from_local(whole, x.device_mesh, [Replicate()] * x.device_mesh.ndim,
                                    run_check=False, shape=x.shape, stride=whole.stride())
    return replicated.redistribute(x.device_mesh, placements)  # local slices only


class _Reshard(torch.autograd.Function):
    """``_through_the_whole``, differentiable: backward reshards the
    gradient back to the input's placements the same way (or with DTensor's
    redistribute where this module does not apply to it)."""

    @staticmethod
    def forward(ctx: Any, x: DTensor, placements: tuple) -> DTensor:
        ctx.source = tuple(x.placements)
        return _through_the_whole(x, placements)

    @staticmethod
    def backward(ctx: Any, grad: DTensor) -> tuple[DTensor, None]:
        if applies(grad, ctx.source):
            return _through_the_whole(grad, ctx.source), None
        return grad.redistribute(grad.device_mesh, ctx.source), None


def reshard(x: DTensor, placements: Sequence[Placement]) -> DTensor:
    """``x`` laid out as ``placements`` through one all_gather (a
    redistribute ``applies`` accepts; differentiable)."""
    return _Reshard.apply(x, tuple(placements))
