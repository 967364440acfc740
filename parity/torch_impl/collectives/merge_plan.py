"""How a redistribute takes one collective where DTensor would take one per
mesh axis: the plan, from placements alone (pure).

DTensor merges the collectives of several mesh axes into one only when
they are the same change (a pending sum completed, a dim's shard gathered
or scattered) and the root mesh's registry holds a flattened mesh of those
axes: ``MergePlan.groups`` are the sets of axes to register. It never
merges otherwise -- re-nesting a dim's shards, moving a shard to another
dim while a second axis also changes, any strided shard (a dim split over
axes out of mesh order: torch asserts when it finds a flattened mesh for
one) -- and logs "While redistributing from (Shard(dim=0), Shard(dim=0),
Shard(dim=0)) to (Replicate(), Replicate(), Shard(dim=0)), 3 sequential
all_gather operations will be performed" into the user's output. There
``MergePlan.whole`` says to take the whole array with one all_gather over
the flattened group of the sharding axes and cut the target's blocks out
of it locally: the bytes DTensor's sequential gathers of those axes move,
in one launch.

``redistribute.merged`` carries a plan out; ``MergePlan.backward_splits``
tells it that the reverse redistribute (the gradient's) would split per
axis too, so the backward must be taken by the same rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor.placement_types import Placement

from parity.torch_impl.runtime.torch_compat import StridedShard


@dataclass(frozen=True)
class MergePlan:
    """What a redistribute from one placement tuple to another takes.

    ``groups``: sets of >= 2 mesh dims (mesh order) whose change is the same
    collective, merged by DTensor given their flattened mesh; ``whole``:
    gathered axis by axis without merging, so taken in one all_gather of
    the whole array; ``strided``: a strided shard on either side (no
    flattened mesh may be registered); ``backward_splits``: the gradient's
    reverse redistribute needs ``whole`` or ``groups`` as well."""

    groups: tuple[tuple[int, ...], ...]
    whole: bool
    strided: bool
    backward_splits: bool


def plan(current: Sequence[Placement], target: Sequence[Placement]) -> MergePlan:
    """The ``MergePlan`` of a redistribute from ``current`` to ``target``."""
    current, target = tuple(current), tuple(target)
    back = backward_target(target, current)
    return MergePlan(groups=merge_groups(current, target), whole=whole_needed(current, target),
                     strided=_strided(current) or _strided(target),
                     backward_splits=bool(merge_groups(target, back))
                     or whole_needed(target, back))


def _strided(placements: tuple) -> bool:
    return any(type(p) is StridedShard for p in placements)


def _change_key(src: Placement, dst: Placement) -> tuple:
    """What DTensor's merge compares for one mesh dim's change (torch's
    ``_optimize_transform_infos``): the (source, target) placements, with
    pending sums and means alike (it reduces both as a sum, then scales)."""
    if isinstance(src, Partial) and src.reduce_op in ("sum", "avg"):
        return ("sum-or-avg", dst)
    return (src, dst)


def merge_groups(current: Sequence[Placement], target: Sequence[Placement]
                 ) -> tuple[tuple[int, ...], ...]:
    """The sets of >= 2 mesh dims whose change from ``current`` to ``target``
    is the same collective (a pending sum completed, a shard gathered or
    scattered): the flattened meshes DTensor needs to find to merge each
    set's per-axis collectives into one. Mesh dims in mesh order."""
    groups: dict[tuple, list[int]] = {}
    for dim, (src, dst) in enumerate(zip(current, target)):
        if src != dst:
            groups.setdefault(_change_key(src, dst), []).append(dim)
    return tuple(tuple(dims) for dims in groups.values() if len(dims) > 1)


def _dim_of(p: Placement) -> int | None:
    return p.dim if isinstance(p, (Shard, StridedShard)) else None


def gathered_mesh_dims(current: Sequence[Placement], target: Sequence[Placement]
                       ) -> tuple[int, ...]:
    """The mesh dims a redistribute from ``current`` to ``target`` gathers
    on, counted generously: every mesh dim that shards a tensor dim whose
    split changes -- a mesh dim's shard of it removed, moved or added (the
    shards of one dim nest, so changing one undoes the others). Mesh
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


def whole_needed(current: Sequence[Placement], target: Sequence[Placement]) -> bool:
    """Whether a redistribute from ``current`` to ``target`` would take
    several collectives DTensor cannot merge (two or more mesh dims
    gathered, strided or not merged by DTensor), and no pending value on
    either side (those complete by all_reduce: ``groups``)."""
    current, target = tuple(current), tuple(target)
    if current == target or any(isinstance(p, Partial) for p in current + target):
        return False
    gathered = gathered_mesh_dims(current, target)
    if len(gathered) < 2:
        return False
    return _strided(current + target) or not _merged_by_dtensor(current, target, gathered)


def backward_target(current: tuple, previous: tuple) -> tuple:
    """Where DTensor's redistribute backward lays a gradient with
    ``current`` placements out: ``previous``, but a pending value there
    stays replicated where the gradient is sharded or replicated (torch's
    ``_redistribute_backward``: no pending gradient is made)."""
    return tuple(Replicate() if isinstance(p, Partial) and not isinstance(c, Partial) else p
                 for c, p in zip(current, previous))
