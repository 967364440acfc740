"""``AxisType``: how a mesh axis takes part in a program's types (JAX's
``jax.sharding.AxisType``).

| type       | meaning (as in JAX)                                              |
|------------|------------------------------------------------------------------|
| ``Auto``   | the sharding is not part of the type; ops choose their own layout|
|            | (``jax.sharding.Mesh``'s default, and Keras's)                    |
| ``Explicit``| the sharding is part of the type (``typeof`` shows ``8@data``);  |
|            | an op whose result sharding is ambiguous raises                  |
|            | ``parity.ShardingTypeError`` (``jax.make_mesh``'s default)        |
| ``Manual`` | inside ``shard_map``: the body sees per-device blocks            |
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from parity.errors import LayoutError


class AxisType(enum.Enum):
    """One mesh axis's type: ``Auto``, ``Explicit`` or ``Manual``."""

    Auto = "Auto"
    Explicit = "Explicit"
    Manual = "Manual"

    def __repr__(self) -> str:
        return f"AxisType.{self.name}"

    __str__ = __repr__


def normalize_axis_types(axis_types: object, ndim: int) -> tuple[AxisType, ...]:
    """One ``AxisType`` per mesh axis from ``axis_types``: ``None`` (all
    ``Auto``), one ``AxisType`` or its name (for every axis), or a sequence
    of them (one per axis).

    Raises ``LayoutError`` for a value that is not an axis type, or a
    sequence whose length is not ``ndim``.
    """
    if axis_types is None:
        return (AxisType.Auto,) * ndim
    if isinstance(axis_types, (AxisType, str)):
        return (_one(axis_types),) * ndim
    if not isinstance(axis_types, Sequence):
        raise LayoutError(
            f"axis_types={axis_types!r} is not an AxisType or a sequence of them. "
            "Fix: e.g. axis_types=(parity.AxisType.Explicit,) * mesh_rank.",
            what="axis_types", value=axis_types)
    types = tuple(_one(t) for t in axis_types)
    if len(types) != ndim:
        raise LayoutError(
            f"axis_types={axis_types!r} has {len(types)} entries for a mesh of {ndim} "
            f"axes. Fix: give one AxisType per mesh axis.",
            what="axis_types", value=axis_types)
    return types


def _one(value: object) -> AxisType:
    if isinstance(value, AxisType):
        return value
    if isinstance(value, str):
        for t in AxisType:
            if value.lower() == t.value.lower():
                return t
    raise LayoutError(
        f"{value!r} is not an axis type. Fix: use parity.AxisType.Explicit, .Auto or "
        ".Manual (or their names).",
        what="axis_types", value=value)
