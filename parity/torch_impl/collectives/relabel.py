"""A pending reduction over mesh axes of size 1 completed as a relabel.

A ``Partial`` placement on a mesh axis of size 1 holds the whole value on
its one rank: completing it (``Partial -> Replicate``) moves no data.
DTensor's ``redistribute`` knows it too -- ``redistribute_local_tensor``
keeps the local tensor for a mesh dim of one chunk -- but only after its
Python (spec building, transform planning, the autograd node), and XLA drops
such a reduction at compile time. ``relabeled(x, placements)`` gives the
same result, the same local tensor under the new placements, without that
Python; differentiable as DTensor's ``redistribute`` is: the gradient comes
back in ``x``'s placements with each pending placement kept replicated
(what DTensor's backward gives).

Eager only: while dynamo traces, the caller's ``redistribute`` stands (the
traced graph launches nothing for it either).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate
from torch.distributed.tensor.placement_types import Placement

from parity.errors import ParityError
from parity.torch_impl.runtime import state
from parity.torch_impl.runtime.torch_compat import DTensorSpec


def is_relabel(x: DTensor, placements: Sequence[Placement]) -> bool:
    """Whether laying ``x`` out as ``placements`` only completes pending
    reductions (``Partial -> Replicate``) on mesh axes of size 1, and at
    least one. ``False`` for anything else (a collective may be needed, or
    nothing changes) and while dynamo traces."""
    if torch.compiler.is_compiling():  # before any attribute read: dynamo would break on one
        return False
    current = x.placements
    if len(placements) != len(current):
        return False
    mesh = x.device_mesh
    changed = False
    for d, (p, t) in enumerate(zip(current, placements)):
        if p is t or (type(p) is type(t) and p == t):  # Partial() == Replicate() is slow
            continue
        if not (isinstance(p, Partial) and isinstance(t, Replicate) and mesh.size(d) == 1):
            return False
        changed = True
    return changed


def relabeled(x: DTensor, placements: Sequence[Placement]) -> DTensor:
    """``x.redistribute(x.device_mesh, placements)`` where ``is_relabel(x,
    placements)``: ``x``'s local tensor under ``placements``, recorded by
    autograd when ``x`` needs a gradient and grad mode is on. Raises
    ``ParityError`` naming both placements when it is not a relabel (call
    ``redistribute`` for those)."""
    placements = tuple(placements)
    if not is_relabel(x, placements):
        raise ParityError(
            f"relabeled: {tuple(x.placements)} -> {placements} on mesh shape "
            f"{tuple(x.device_mesh.shape)} is not a completion over mesh axes of size 1; "
            "use DTensor.redistribute")
    if x.requires_grad:  # recorded under grad mode, as DTensor's Redistribute is
        return _Relabel.apply(x, placements)
    return _with_placements(x, placements)


# (source spec, placements) -> the relabeled spec: building a DTensorSpec
# costs tens of microseconds, more than the rest of a relabel; a step meets
# the same few specs every time. Bounded: cleared when full. One runtime
# generation's (``state.per_generation``): the key compares meshes by value,
# and the spec holds its mesh, which would be the last generation's.
_specs: dict[tuple, DTensorSpec] = {}
_SPECS_MAX = 256
state.per_generation(_specs.clear)


def _with_placements(x: DTensor, placements: tuple) -> DTensor:
    key = (x._spec, placements)
    spec = _specs.get(key)
    if spec is None:
        if len(_specs) >= _SPECS_MAX:
            _specs.clear()
        spec = _specs[key] = DTensorSpec(x.device_mesh, placements,
                                         tensor_meta=x._spec.tensor_meta)
    return DTensor(x._local_tensor, spec, requires_grad=x.requires_grad)


def _gradient_placements(grad: DTensor, source: tuple) -> tuple:
    """Where DTensor's backward of a redistribute from ``source`` lays the
    gradient out: ``source``, with a pending placement kept replicated where
    the gradient is not pending itself."""
    return tuple(Replicate() if isinstance(s, Partial) and not isinstance(g, Partial) else s
                 for g, s in zip(grad.placements, source))


class _Relabel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: DTensor, placements: tuple) -> DTensor:  # type: ignore[override]
        ctx.source = tuple(x.placements)
        return _with_placements(x, placements)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        if not isinstance(grad, DTensor):
            return grad, None
        target = _gradient_placements(grad, ctx.source)
        if tuple(grad.placements) == target:
            return grad, None
        if is_relabel(grad, target):
            return relabeled(grad, target), None
        return grad.redistribute(grad.device_mesh, target), None
