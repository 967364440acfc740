"""Unreduced values under ``jax_semantics()``: the DTensor placement of a
value JAX types as unreduced (``P(..., unreduced={"model"})``,
``float32[8@data,8]{U:model}``), and the ops JAX allows on it, with JAX's
rules (0.12, the normative version; 0.10.2 where it agrees).

``Unreduced`` is a ``Partial("sum")`` -- every rank holds a term of the
sum, DTensor's ``redistribute`` completes it as it completes any pending
sum -- that is *not equal* to ``Partial("sum")``: a user's typed pending sum
must never be taken for one of parity's own pending reductions (which
``jax_semantics()`` completes before the next op), nor meet DTensor's op
strategies, which would drop the type. The mode runs an op with such an
operand here (``involved``, ``run_on_unreduced``); ``explicit.api`` makes
them (``reshard``) and prints them (``typeof``).

| op on a value unreduced over ``A``              | result (JAX)                        |
|-------------------------------------------------|-------------------------------------|
| ``a + b``, ``a - b``: both unreduced over ``A`` | unreduced over ``A``                |
| ``a + b`` with ``b`` not unreduced over ``A``   | ``ShardingTypeError`` (no implicit  |
|                                                 | communication)                      |
| ``-a``, ``a.sum(dims)``, ``transpose``/``permute``/``t``, a dtype cast | unreduced over ``A`` |
| ``a * s``, ``a / s``, ``a @ b`` and every other op | ``ShardingTypeError``: reshard to a |
|                                                 | reduced spec first                  |

JAX 0.10.2 raises ``NotImplementedError`` for ``-a``, ``a - b``, ``a / s``
and non-linear ops where 0.12 computes ``-a``/``a - b`` and refuses the
others with ``ShardingTypeError`` (``/``: ``ValueError``); parity follows
0.12. The linear ops run on DTensor's own ``Partial("sum")`` rules (no
communication); a pending sum the op adds over another axis (``sum`` over
a sharded dim) is completed, as JAX completes it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate

from parity.errors import ShardingTypeError
from parity.torch_impl.layouts.meshes import mesh_axis_names
from parity.torch_impl.semantics.traced_errors import raise_error


# --- the placement ------------------------------------------------------------


# Whether this process has made an ``Unreduced`` placement. Until one
# exists no operand can hold one, and ``involved`` answers without looking at
# the operands: under ``torch.compile`` that walk was dynamo tracing every
# operand's placements on every op. A compiled step reads this global under a
# guard: made later, the step recompiles.
_made = False


class Unreduced(Partial):
    """A pending sum over one mesh axis that the program's types name
    (JAX's ``unreduced``); equal only to another ``Unreduced``."""

    def __init__(self) -> None:
        global _made
        _made = True
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


# --- the ops JAX allows on it ------------------------------------------------


# Linear in every operand: all of them unreduced over the same axes.
_LINEAR_BINARY = frozenset({"add", "__add__", "__radd__", "__iadd__", "sub", "__sub__", "__rsub__",
                            "subtract"})
# Linear in their one tensor operand.
_LINEAR_UNARY = frozenset({"neg", "__neg__", "negative", "sum", "transpose", "t", "permute",
                           "swapaxes", "swapdims", "to", "float", "double", "half", "bfloat16",
                           "clone", "contiguous"})


def involved(args: tuple, kwargs: dict) -> bool:
    """Whether an operand (or one inside a list/tuple argument) is unreduced."""
    if not _made:
        return False
    for a in (*args, *kwargs.values()):
        if type(a) is DTensor:
            if unreduced_axes(a):
                return True
        elif isinstance(a, (list, tuple)) and any(unreduced_axes(b) for b in a):
            return True
    return False


def as_partial(x: DTensor) -> DTensor:
    """``x`` with each ``Unreduced`` placement a plain ``Partial("sum")`` (the
    same local blocks; differentiable)."""
    return retype(x, tuple(Partial("sum") if type(p) is Unreduced else p for p in x.placements))


def typed(x: DTensor, axes: tuple[str, ...], op: str) -> DTensor:
    """``x`` unreduced over ``axes``: a pending sum over another axis is
    completed first, each of ``axes`` must hold one. Raises
    ``ShardingTypeError`` where DTensor reduced one of ``axes`` on the way."""
    names = mesh_axis_names(x.device_mesh)
    placements = []
    for n, p in zip(names, x.placements):
        if n in axes:
            if not isinstance(p, Partial) or p.reduce_op != "sum":
                raise_error(ShardingTypeError,
                            f"{op}: its result is no longer a pending sum over {n!r} ({p}); "
                            "Fix: reshard the operands to a reduced spec first.",
                            op=op, fix="reshard")
            placements.append(Unreduced())
        else:
            placements.append(p)
    out = retype(x, tuple(placements))
    # Typed first, then the other pending sums completed (the Unreduced dims
    # stay as they are): under torch.compile the other order leaves a
    # constant in AOTAutograd's graph.
    if any(isinstance(p, Partial) and type(p) is not Unreduced for p in out.placements):
        out = out.redistribute(out.device_mesh, [
            Replicate() if isinstance(p, Partial) and type(p) is not Unreduced else p
            for p in out.placements])
    return out


def _refuse(op: str, message: str) -> None:
    raise_error(ShardingTypeError,
                f"{op}: {message} Fix: reshard(x, P(...)) without unreduced= first (it "
                "completes the sum).", op=op, fix="reshard(x, P(...)) without unreduced")


def _axes_of_binary(name: str, args: tuple) -> tuple[str, ...]:
    if len(args) < 2:
        _refuse(name, "needs two operands.")
    first, second = unreduced_axes(args[0]), unreduced_axes(args[1])
    if not first or not second:
        _refuse(name, f"one operand is unreduced (over {first or second}) and the other is "
                      "not; JAX allows no implicit communication here.")
    if first != second:
        _refuse(name, f"its operands are unreduced over different axes ({first} and {second}).")
    return first


def _map(value: Any, fn) -> Any:
    if type(value) is DTensor:
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_map(v, fn) for v in value)
    return value


def run_on_unreduced(func, name: str, args: tuple, kwargs: dict) -> Any:
    """``func(*args, **kwargs)`` with an unreduced operand, as JAX types it
    (the table above). Raises ``ShardingTypeError`` for an op JAX refuses
    on unreduced values (every op not in the table)."""
    if name in _LINEAR_BINARY:
        axes = _axes_of_binary(name, args)
        if any(unreduced_axes(a) for a in args[2:]) or kwargs.get("alpha", 1) != 1:
            _refuse(name, "scales an unreduced operand (alpha=) or has a third one.")
    elif name in _LINEAR_UNARY:
        axes = unreduced_axes(args[0])
        if not axes or involved(args[1:], kwargs):
            _refuse(name, "is linear in its first operand only.")
    else:
        _refuse(name, "JAX computes no such op on an unreduced value (only +, -, negation, "
                      "sum, transposes and dtype casts keep the sum pending).")
    plain_args = _map(args, lambda t: as_partial(t) if unreduced_axes(t) else t)
    out = func(*plain_args, **kwargs)
    return _map(out, lambda t: typed(t, axes, name))
