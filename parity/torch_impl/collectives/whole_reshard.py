"""A redistribute DTensor would gather one mesh axis at a time, in one
collective through the whole array.

DTensor merges the all_gathers of several mesh axes into one only when they
are the same change (each ``Shard(d) -> Replicate()``), in ascending mesh
order, with a flattened mesh of those axes registered, and never for a
strided shard (a dim split over axes out of mesh order: torch asserts when
it finds a flattened mesh for one). Otherwise it gathers axis by axis and
logs "While redistributing from (Shard(dim=0), Shard(dim=0), Shard(dim=0))
to (Replicate(), Replicate(), Shard(dim=0)), 3 sequential all_gather
operations will be performed" into the user's output -- e.g. re-nesting a
dim's shards, moving a shard to another dim while a second axis also
changes, any strided reshard.

Such a redistribute (``applies``) takes the whole array with one all_gather
over the flattened group of ``x``'s sharding axes (``whole.gather_whole``)
and cuts the target's blocks out of it locally (a replicated DTensor laid
out as the target: a local slice, no communication). The bytes moved are
the whole array's, as DTensor's sequential gathers of those axes move;
where an axis's shard could have stayed it moves more, in one launch.
``redistribute.merged`` makes it differentiable (backward: the reverse
redistribute, by the same rules).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor.placement_types import Placement

from parity.torch_impl.collectives.whole import gather_whole
from parity.torch_impl.layouts.specs import evenly_sharded
from parity.torch_impl.layouts.specs import describable
from parity.torch_impl.runtime.torch_compat import StridedShard


def _dim_of(p: Placement) -> int | None:
    return p.dim if isinstance(p, (Shard, StridedShard)) else None


def gathered_mesh_dims(current: Sequence[Placement], target: Sequence[Placement]
                       ) -> tuple[int, ...]:
    """The mesh dims a redistribute from ``current`` to ``target`` gathers
    on, counted generously: every mesh dim that shards a tensor dim whose
    split changes -- a mesh dim's shard of it removed, moved or added (the
    shards of one dim nest, so changing one undoes the others). Pure; mesh
    order."""
    changed = {_dim_of(p) for c, t in zip(current, target) if c != t for p in (c, t)} - {None}
    return tuple(m for m, p in enumerate(current) if _dim_of(p) in changed)


def _merged_by_dtensor(current: tuple, target: tuple, gathered: tuple[int, ...]) -> bool:
    """Whether DTensor merges this redistribute's gathers itself (given the
    flattened mesh): each gathered axis changes ``Shard(d) -> Replicate()``
    for one ``d``, and no other axis changes."""
    changes = {(c, t) for c, t in zip(current, target) if c != t}
    return (len(changes) == 1 and isinstance(next(iter(changes))[1], Replicate)
            and all(current[m] != target[m] for m in gathered))


def needed(current: Sequence[Placement], target: Sequence[Placement]) -> bool:
    """Whether a redistribute from ``current`` to ``target`` would take
    several collectives DTensor cannot merge (two or more mesh dims
    gathered, strided or not merged by DTensor), and no pending value on
    either side (those complete by all_reduce, merged elsewhere). Pure."""
    current, target = tuple(current), tuple(target)
    if current == target or any(isinstance(p, Partial) for p in current + target):
        return False
    gathered = gathered_mesh_dims(current, target)
    if len(gathered) < 2:
        return False
    strided = any(type(p) is StridedShard for p in current + target)
    return strided or not _merged_by_dtensor(current, target, gathered)


def applies(x: DTensor, placements: Sequence[Placement]) -> bool:
    """``needed`` for ``x``, which is evenly sharded and described by a spec
    (``gather_whole`` places the blocks by the spec), and not while dynamo
    traces (a flattened group cannot be created under fake tensors)."""
    if torch.compiler.is_dynamo_compiling() or not needed(x.placements, placements):
        return False
    return describable(x) and evenly_sharded(x)


def reshard(x: DTensor, placements: Sequence[Placement]) -> DTensor:
    """``x`` (a case ``applies`` accepts) laid out as ``placements`` through
    one all_gather; not differentiable by itself (``redistribute.merged``)."""
    whole = gather_whole(x)
    replicated = DTensor.from_local(whole, x.device_mesh, [Replicate()] * x.device_mesh.ndim,
                                    run_check=False, shape=x.shape, stride=whole.stride())
    return replicated.redistribute(x.device_mesh, tuple(placements))  # local slices only
