"""A DTensor moved to another layout through DTensor's differentiable
``redistribute``, pending sums completed on the way -- each change that
several mesh axes share with one collective.

DTensor completes ``(Partial(sum), Partial(sum))`` with one all_reduce per
mesh axis (and gathers ``(Shard(0), Shard(0))`` with one all_gather per
axis), and says so in every user's log ("While redistributing from
(Partial(sum), Partial(sum)) to (Replicate(), Replicate()), 2 sequential
all_reduce operations will be performed ..."), unless the root mesh's
registry holds a flattened mesh of those axes: then it merges them into one
collective over the flattened group. parity's gathers already work that
way: the flattened mesh is created once per mesh and set of axes
(``flat_groups``), and registered only for the duration of one
redistribute whose placements hold no strided shard (torch asserts on a
strided redistribute when it finds a flattened mesh).

``move(x, placements)`` lays ``x`` out as ``placements`` (the mode passes
placements its cached decision already converted); ``redistribute_to(x,
spec)`` is its front for a spec; ``merged(x, placements)`` is the
redistribute itself (differentiable, DTensor's own); ``resolve_pending(x)``
the completion of every pending axis.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate
from torch.distributed.tensor.placement_types import Placement

from parity.layout import Spec
from parity.torch_impl.collectives import merge_plan
from parity.torch_impl.collectives.flat_groups import registered as registered_flat_mesh
from parity.torch_impl.collectives.gradient_buckets import (
    RESOLVED_ATTR,
    leaf_entry,
    remember_resolved,
)
from parity.torch_impl.collectives.relabel import is_relabel, relabeled
from parity.torch_impl.collectives.whole import gather_whole
from parity.torch_impl.layouts.specs import blocks_of, placements_for


def pending_mesh_dims(x: DTensor) -> tuple[int, ...]:
    """The mesh dims on which ``x`` holds a pending (``Partial``) value."""
    return tuple(i for i, p in enumerate(x.placements) if isinstance(p, Partial))


def merged(x: DTensor, placements: Sequence[Placement]) -> DTensor:
    """``x.redistribute(x.device_mesh, placements)`` (differentiable), with
    the collectives that change several mesh axes the same way -- pending
    sums, means, maxima or minima completed, a dim's shards gathered --
    merged by DTensor into one over those axes' flattened group (the
    flattened meshes are registered for this one call), and a redistribute
    DTensor would gather axis by axis without merging (a strided shard,
    re-nested shards) taken in one all_gather of the whole array: the plan
    is ``merge_plan``'s. Backward is the reverse redistribute by the same
    rules (DTensor's own backward would split it per axis). Pending values
    completed on mesh axes of size 1 and nothing else changed: a relabel
    (``relabel``), no redistribute. While dynamo traces (no flattened mesh
    can be created) it is DTensor's redistribute unchanged."""
    return _redistributed(x, tuple(placements), differentiable=True)


def _redistributed(x: DTensor, placements: tuple, differentiable: bool,
                   resolving: bool = False) -> DTensor:
    """``merged``; ``differentiable=False``: its forward, not differentiable
    by itself where it gathers the whole array (``_Merged`` runs it);
    ``resolving``: ``placements`` complete every pending axis of ``x`` and
    change nothing else (``resolve_pending``), and the completion of a
    masked partial sum is remembered (DTensor releases its mask at the
    first completion)."""
    mesh = x.device_mesh
    if torch.compiler.is_dynamo_compiling():
        return x.redistribute(mesh, placements)
    blocks = blocks_of(x)  # the layout questions below, answered once
    if is_relabel(x, placements):  # pending only on mesh axes of size 1: nothing moves
        out = relabeled(x, placements)
    else:
        how = merge_plan.plan(tuple(x.placements), placements)
        if differentiable and x.requires_grad and torch.is_grad_enabled() and (
                how.whole or how.backward_splits):
            out = _Merged.apply(x, placements)  # the whole gather is not differentiable
        # an uneven shard (a raw DTensor's: 10 rows over 8 ranks) is gathered
        # axis by axis: DTensor's all_gather over a flattened mesh assumes even
        # chunks and silently corrupts uneven nested blocks (torch 2.13;
        # pytorch#194457, open, fixes it): a leaky_relu gradient on (2, 2, 2)
        # came back with zero rows
        elif how.whole and blocks.spec is not None and blocks.even:  # blocks placed by the spec
            whole = gather_whole(x, blocks)  # one all_gather, not one per axis
            replicated = DTensor.from_local(whole, mesh, [Replicate()] * mesh.ndim,
                                            run_check=False, shape=x.shape, stride=whole.stride())
            out = replicated.redistribute(mesh, placements)  # local slices only
        elif not how.groups or how.strided or not blocks.even:
            out = x.redistribute(mesh, placements)
        else:
            with contextlib.ExitStack() as stack:
                for dims in how.groups:
                    stack.enter_context(registered_flat_mesh(mesh, dims))
                out = x.redistribute(mesh, placements)
    if resolving and blocks.masked:
        remember_resolved(x, out)
    return out


class _Merged(torch.autograd.Function):
    """``merged``'s forward with its backward by the same rules: DTensor's
    own backward of a redistribute gathers a gradient axis by axis."""

    @staticmethod
    def forward(ctx, x: DTensor, placements: tuple) -> DTensor:  # type: ignore[override]
        ctx.previous = tuple(x.placements)
        return _redistributed(x, placements, differentiable=False)

    @staticmethod
    def backward(ctx, grad: DTensor):  # type: ignore[override]
        current = tuple(grad.placements)
        return merged(grad, merge_plan.backward_target(current, ctx.previous)), None


def resolve_pending(x: DTensor) -> DTensor:
    """``x`` with every pending reduction completed (replicated on those
    mesh axes), pending sums over several axes in one all_reduce. A
    completion made already (a backward's root, reduced with the gradients:
    ``gradient_buckets``; a masked partial sum, whose mask DTensor releases
    at its first completion) is taken as it is."""
    if not any(isinstance(p, Partial) for p in x.placements):
        return x
    compiling = torch.compiler.is_dynamo_compiling()
    if not compiling:
        # (version, completion) remembered while x is unchanged
        found = getattr(x, RESOLVED_ATTR, None)
        if found is not None and found[0] == x._version:
            return found[1]
    return _redistributed(x, tuple(Replicate() if isinstance(p, Partial) else p
                                   for p in x.placements), True, resolving=True)


def move(x: DTensor, target: tuple, *, guard: bool = False) -> DTensor:
    """``x`` laid out as the DTensor placements ``target`` through
    DTensor's differentiable ``redistribute`` (so autograd records it and
    backward runs the mirror collective). Pending reductions are completed
    on the way.

    ``guard`` redistributes even when nothing moves: the autograd node then
    brings the gradient back to ``x``'s own placement; for a leaf that needs
    a gradient that node is ``gradient_buckets.leaf_entry``'s (a pending sum
    in the gradient may wait for the backward's bucket).
    """
    mesh = x.device_mesh
    current = tuple(x.placements)
    if current != target:
        if any(isinstance(p, Partial) for p in current):
            # Partial -> strided shard is not implemented by DTensor: reduce first.
            if any(isinstance(p, Partial) and not isinstance(t, (Replicate,)) and
                   type(t).__name__ == "_StridedShard" for p, t in zip(current, target)):
                x = x.redistribute(mesh, [Replicate() if isinstance(p, Partial) else p
                                          for p in current])
        out = merged(x, target)  # pending sums over several axes: one collective
        if any(isinstance(p, Partial) and p.reduce_op != "sum" for p in current):
            # A pending mean (a mean over a sharded dim): DTensor's backward
            # cannot turn a pending-sum gradient into Partial("avg") ("from one
            # partial type (P(sum)) to another (P(avg)) is unsupported"); this
            # same-placement node lays the gradient out as ``target`` first.
            out = out.redistribute(mesh, target)
        return out
    if not guard:
        return x
    if x.is_leaf and x.requires_grad:
        return leaf_entry(x, merged)  # its gradient's completion may wait for the bucket
    return x.redistribute(mesh, target)


def redistribute_to(x: DTensor, spec: Spec, *, guard: bool = False) -> DTensor:
    """``move(x, placements_for(spec, mesh), guard=guard)``: ``x`` laid out
    as ``spec``. Raises ``LayoutError`` for a spec the mesh cannot hold."""
    return move(x, placements_for(spec, x.device_mesh), guard=guard)
