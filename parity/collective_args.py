"""Argument checks and output specs shared by every backend's collectives.

The same bad argument gets the same ``LayoutError`` on JAX and on torch, and
both backends compute the output spec SPEC gives from one function.
"""

from __future__ import annotations

from collections.abc import Sequence

from parity.errors import LayoutError
from parity.layout import Spec, spec_without_axis

REDUCE_OPS = ("sum", "mean", "max", "min")


def check_op(op: object, what: str) -> str:
    """``op`` if it is one of ``REDUCE_OPS``; else ``LayoutError``."""
    if not isinstance(op, str) or op not in REDUCE_OPS:
        raise LayoutError(f"{what}: op={op!r} is not one of {REDUCE_OPS}.", what="op", value=op)
    return op


def check_axis(axis: object, ndim: int, what: str) -> int:
    """``axis`` as a non-negative dim of a rank-``ndim`` array (negative counts
    from the end); ``LayoutError`` when out of range or not an int."""
    if isinstance(axis, bool) or not isinstance(axis, int) or not -ndim <= axis < ndim:
        raise LayoutError(
            f"{what}: axis={axis!r} is out of range for an array of rank {ndim}; "
            f"choose an int in [{-ndim}, {ndim}).",
            what="axis", value=axis,
        )
    return axis % ndim


def check_axis_name(
    axis_name: object, names: Sequence[str], shape: Sequence[int], what: str
) -> int:
    """Position of ``axis_name`` among the mesh axes; ``LayoutError`` if absent."""
    names = tuple(names)
    if not isinstance(axis_name, str) or axis_name not in names:
        raise LayoutError(
            f"{what}: axis_name={axis_name!r} is not a mesh axis; the mesh axes "
            f"are {names} with shape {tuple(shape)}.",
            what="axis_name", value=axis_name,
        )
    return names.index(axis_name)


def scattered_spec(spec: Spec, axis: int, axis_name: str) -> Spec:
    """``reduce_scatter``'s output spec: ``axis_name`` removed, then appended
    as the minor-most name of dim ``axis``."""
    out = list(spec_without_axis(spec, axis_name))
    out[axis] = out[axis] + (axis_name,)
    return tuple(out)
