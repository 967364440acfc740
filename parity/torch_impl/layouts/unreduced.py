"""``Unreduced``: the DTensor placement of a value JAX types as unreduced
(``P(..., unreduced={"model"})``, ``float32[8@data,8]{U:model}``).

It is a ``Partial("sum")`` -- every rank holds a term of the sum, DTensor's
``redistribute`` completes it as it completes any pending sum -- that is
*not equal* to ``Partial("sum")``: a user's typed pending sum must never be
taken for one of parity's own pending reductions (which ``jax_semantics()``
completes before the next op), nor meet DTensor's op strategies, which
would drop the type. ``semantics.unreduced_ops`` runs the ops JAX allows on
such values; ``explicit.api`` makes them (``reshard``) and prints them
(``typeof``).
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate

from parity.torch_impl.layouts.meshes import mesh_axis_names


class Unreduced(Partial):
    """A pending sum over one mesh axis that the program's types name
    (JAX's ``unreduced``); equal only to another ``Unreduced``."""

    def __init__(self) -> None:
        super().__init__("sum")

    def __eq__(self, other: object) -> bool:
        return type(other) is Unreduced

    def __ne__(self, other: object) -> bool:
        return type(other) is not Unreduced

    def __hash__(self) -> int:
        return hash("parity.Unreduced")

    def __repr__(self) -> str:
        return "Unreduced()"

    def __str__(self) -> str:
        return "U"

    def __reduce__(self) -> tuple:
        return Unreduced, ()


def unreduced_axes(x: object) -> tuple[str, ...]:
    """The mesh axes (in mesh order) on which DTensor ``x`` holds an
    ``Unreduced`` placement; ``()`` for anything else."""
    if type(x) is not DTensor:
        return ()
    placements = x.placements
    for p in placements:  # a loop, not any(generator): dynamo traces this per operand
        if type(p) is Unreduced:
            break
    else:
        return ()
    names = mesh_axis_names(x.device_mesh)
    return tuple(n for n, p in zip(names, placements) if type(p) is Unreduced)


def _cotangent(g: DTensor, placements: tuple) -> DTensor:
    """The gradient of a pending sum is replicated along its axes: ``g``
    with every pending placement completed, laid out as ``placements``
    (pending ones read as replicated)."""
    with torch._C.DisableTorchFunction():
        if any(isinstance(p, Partial) for p in g.placements):
            g = g.redistribute(g.device_mesh, [Replicate() if isinstance(p, Partial) else p
                                               for p in g.placements])
        target = [Replicate() if isinstance(p, Partial) else p for p in placements]
        return g.redistribute(g.device_mesh, target) if tuple(g.placements) != tuple(target) else g


class _Retype(torch.autograd.Function):
    """The same blocks under other placements; ``scale`` multiplies them
    (``1/n`` to split a replicated value into ``n`` equal terms)."""

    @staticmethod
    def forward(ctx, x: DTensor, placements: tuple, scale: float) -> DTensor:
        ctx.placements = tuple(x.placements)
        with torch._C.DisableTorchFunction():
            local = x.to_local()
            if scale != 1.0:
                local = local * scale
            return DTensor.from_local(local, x.device_mesh, placements, run_check=False,
                                      shape=x.shape, stride=x.stride())

    @staticmethod
    def backward(ctx, g: DTensor):
        return _cotangent(g, ctx.placements), None, None


def retype(x: DTensor, placements: tuple, scale: float = 1.0) -> DTensor:
    """``x``'s blocks (times ``scale``) as a DTensor with ``placements``,
    for a change that keeps the global value (``Partial`` <-> ``Unreduced``,
    or a replicated value split into ``n`` terms of ``x / n``).
    Differentiable: the gradient is the output's, completed and laid out as
    ``x``."""
    return _Retype.apply(x, tuple(placements), float(scale))
