"""``report(model, layout_map)``: what a layout map does to a model's
variables, as data and as a table.

Per variable: the key Keras uses for it (``matching.matching_key``), its
layout, its bytes per device; then the keys that matched nothing, the
variables of at least ``large_bytes`` left fully replicated, and each
device's total. The bytes are computed from shapes and dtypes (no value is
read), so a model from ``abstract_model`` reports what it would hold.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from parity.keras_layout.matching import matching_key, unmatched_keys


@dataclasses.dataclass(frozen=True)
class VariableReport:
    """One variable: ``path``, ``shape``, ``dtype``, ``key`` (the layout map
    key that matched; ``None``: replicated by default), ``axes`` (one mesh
    axis name, a tuple of names, or ``None`` per dim), ``bytes`` (the whole
    value) and ``device_bytes`` (the block one device holds; every device
    holds one of that size when the layout divides the shape), ``divisible``
    (``False``: the layout does not divide the shape, JAX refuses it; the
    largest block is counted)."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    key: str | None
    axes: tuple[Any, ...]
    bytes: int
    device_bytes: int
    divisible: bool

    @property
    def replicated(self) -> bool:
        return all(a is None for a in self.axes)


@dataclasses.dataclass(frozen=True)
class LayoutReport:
    """The report: ``variables``; ``unmatched_keys`` (keys that lay out no
    variable); ``large_replicated`` (paths of variables of at least
    ``large_bytes`` that stay fully replicated); ``device_bytes`` (one
    device's total, the largest device's when blocks differ);
    ``total_bytes`` (the model's); ``notes`` (the derivation's fallback
    layouts, when the map came from ``layout_map_for``)."""

    mesh_shape: tuple[int, ...]
    axis_names: tuple[str, ...]
    variables: tuple[VariableReport, ...]
    unmatched_keys: tuple[str, ...]
    large_bytes: int
    large_replicated: tuple[str, ...]
    device_bytes: int
    total_bytes: int
    notes: tuple[str, ...]

    @property
    def sharded_fraction(self) -> float:
        """The fraction of the model's bytes in variables with a sharded dim."""
        sharded = sum(v.bytes for v in self.variables if not v.replicated)
        return sharded / self.total_bytes if self.total_bytes else 0.0

    def table(self) -> Any:
        """A ``rich.table.Table`` of the variables and the totals."""
        from rich.table import Table

        table = Table(title=f"layout on mesh {dict(zip(self.axis_names, self.mesh_shape))}")
        for column in ("variable", "shape", "dtype", "key", "layout", "bytes/device"):
            table.add_column(column, justify="right" if column == "bytes/device" else "left")
        for v in self.variables:
            table.add_row(v.path, str(v.shape), v.dtype, v.key or "-", str(v.axes),
                          f"{v.device_bytes:,}" + ("" if v.divisible else " (indivisible)"))
        table.caption = (
            f"largest device: {self.device_bytes:,} bytes of {self.total_bytes:,} "
            f"({self.sharded_fraction:.1%} of the bytes sharded); unmatched keys: "
            f"{list(self.unmatched_keys) or 'none'}; replicated >= {self.large_bytes:,} bytes: "
            f"{list(self.large_replicated) or 'none'}"
            + "".join(f"\nnote: {n}" for n in self.notes)
        )
        return table

    def print(self, console: Any = None) -> None:
        """Print ``table()`` with rich (to ``console``, else a new one)."""
        from rich.console import Console

        (console or Console()).print(self.table())


def _itemsize(dtype: str) -> int:
    if dtype == "bool":
        return 1
    bits = re.search(r"(\d+)$", dtype)
    if bits is None:
        raise ValueError(f"report: cannot size dtype {dtype!r}.")
    return int(bits.group(1)) // 8


def _names(entry: Any) -> tuple[str, ...]:
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def report(model: Any, layout_map: Any, *, large_bytes: int = 1 << 20) -> LayoutReport:
    """The report of ``layout_map`` (a ``keras.distribution.LayoutMap``) on
    ``model``'s variables (``model.weights``; a path repeated by several
    variables counts each).

    Raises ``ValueError`` when a variable's path matches several keys (as
    Keras does) or a layout names an axis the map's mesh does not have;
    ``TypeError`` naming the value when ``model`` has no ``weights`` or
    ``layout_map`` is not a ``LayoutMap`` over a mesh, or ``large_bytes`` is
    not an int.
    """
    mesh = getattr(layout_map, "device_mesh", None)
    if mesh is None or not hasattr(layout_map, "keys") or not hasattr(mesh, "axis_names"):
        raise TypeError(f"report: layout_map must be a keras.distribution.LayoutMap over a "
                        f"DeviceMesh; got layout_map={layout_map!r}.")
    if not hasattr(model, "weights"):
        raise TypeError(f"report: model must be a Keras model (with weights); got "
                        f"model={model!r}.")
    if isinstance(large_bytes, bool) or not isinstance(large_bytes, int):
        raise TypeError(f"report: large_bytes must be an int (bytes); got "
                        f"large_bytes={large_bytes!r}.")
    sizes = dict(zip(tuple(mesh.axis_names), (int(s) for s in mesh.shape)))
    rows = []
    for v in model.weights:
        shape = tuple(int(s) for s in v.shape)
        key = matching_key(layout_map, v.path)
        axes = tuple(layout_map[key].axes) if key is not None else (None,) * len(shape)
        if len(axes) != len(shape):
            raise ValueError(
                f"report: key {key!r} gives {v.path} (rank {len(shape)}) the layout {axes} "
                f"of rank {len(axes)}."
            )
        block, divisible = [], True
        for n, entry in zip(shape, axes):
            unknown = [a for a in _names(entry) if a not in sizes]
            if unknown:
                raise ValueError(
                    f"report: key {key!r} names mesh axes {unknown} the mesh "
                    f"{tuple(sizes)} lacks."
                )
            shards = math.prod(sizes[a] for a in _names(entry))
            divisible = divisible and n % shards == 0
            block.append(-(-n // shards))
        itemsize = _itemsize(str(v.dtype))
        rows.append(VariableReport(
            path=v.path, shape=shape, dtype=str(v.dtype), key=key, axes=axes,
            bytes=math.prod(shape) * itemsize, device_bytes=math.prod(block) * itemsize,
            divisible=divisible,
        ))
    derivation = getattr(layout_map, "parity_derivation", None)
    return LayoutReport(
        mesh_shape=tuple(sizes.values()),
        axis_names=tuple(sizes),
        variables=tuple(rows),
        unmatched_keys=unmatched_keys(layout_map, [r.path for r in rows]),
        large_bytes=large_bytes,
        large_replicated=tuple(r.path for r in rows if r.replicated and r.bytes >= large_bytes),
        device_bytes=sum(r.device_bytes for r in rows),
        total_bytes=sum(r.bytes for r in rows),
        notes=derivation.notes if derivation is not None else (),
    )
