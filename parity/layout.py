"""``TensorLayout``: which mesh axes split each dim of a tensor.

One entry per tensor dim:

| entry          | meaning                                  | JAX spec entry     |
|----------------|------------------------------------------|--------------------|
| ``None``       | replicated on every mesh axis            | ``None``           |
| ``"a"``        | split over mesh axis ``a``               | ``"a"``            |
| ``("a", "b")`` | split over ``a`` then ``b``, ``a`` major | ``("a", "b")``     |

A layout is a small immutable value: it is checked when built (a name used
twice raises ``LayoutError``; with a mesh, an unknown name too) and when
applied to a shape (rank mismatch: ``LayoutError``; a dim that does not divide
by its shard count: ``ShardingError``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from parity.errors import IndivisibleError, LayoutError
from parity.mesh import DeviceMesh
from parity.partition_spec import PartitionSpec

# the spec-entry helpers live in a module below this one and partition_spec
# (which imports no layout); re-exported here for existing callers
from parity.spec_entries import AxisEntry, Spec, entry_from_names, normalize_entry

__all__ = ["AxisEntry", "Spec", "TensorLayout", "entry_from_names", "mesh_coords",
           "normalize_entry", "spec_without_axis"]


class TensorLayout:
    """How a tensor is laid out on a ``DeviceMesh``.

    ```python
    mesh = parity.DeviceMesh((2, 4), ("data", "model"))
    layout = parity.TensorLayout(("data", None), mesh)       # rows over data
    both = parity.TensorLayout((("data", "model"),), mesh)   # 8-way, data major
    same = parity.TensorLayout(parity.P("data", None), mesh) # JAX's NamedSharding(mesh, P(...))
    ```

    ``axes`` may be a ``parity.P``: its entries, one per dim (a ``P``
    shorter than the array's rank makes a layout of that shorter rank).

    Immutable: setting an attribute raises ``AttributeError``
    (``with_mesh`` gives a new layout).

    Raises ``LayoutError`` for a malformed entry, a mesh axis used twice,
    (with a mesh) an axis the mesh does not have, a ``device_mesh`` that is
    not a ``parity.DeviceMesh``, and a ``P`` with ``unreduced=``.
    """

    __slots__ = ("_axes", "_spec", "_device_mesh")

    def __init__(
        self, axes: Sequence[AxisEntry] | "PartitionSpec", device_mesh: DeviceMesh | None = None
    ) -> None:
        if device_mesh is not None and not isinstance(device_mesh, DeviceMesh):
            raise LayoutError(
                f"TensorLayout device_mesh must be a parity.DeviceMesh or None; got "
                f"{type(device_mesh).__name__}: {device_mesh!r}. Fix: "
                "parity.make_mesh(shape, names) or parity.DeviceMesh(shape, names).",
                what="device_mesh", value=device_mesh,
            )
        if isinstance(axes, PartitionSpec):
            if axes.unreduced:
                raise LayoutError(
                    f"TensorLayout({axes!r}): unreduced= types a pending sum, not a layout. "
                    "Fix: leave unreduced= out, or use backend.device_put / backend.reshard "
                    "with that P to make an unreduced value.",
                    what="unreduced", value=axes,
                )
            axes = axes.entries
        if isinstance(axes, str):
            raise LayoutError(
                f"TensorLayout axes must be a sequence, one entry per dim; got the "
                f"string {axes!r}. Fix: write ({axes!r},).",
                what="axes", value=axes,
            )
        if not isinstance(axes, (tuple, list)):
            raise LayoutError(
                f"TensorLayout axes must be a tuple or list, one entry per dim; got "
                f"{axes!r}. Fix: e.g. ('data', None).",
                what="axes", value=axes,
            )
        spec = tuple(normalize_entry(entry) for entry in axes)
        seen: dict[str, int] = {}
        for dim, names in enumerate(spec):
            for name in names:
                if name in seen:
                    raise LayoutError(
                        f"Mesh axis {name!r} is used twice in layout {tuple(axes)} "
                        f"(dims {seen[name]} and {dim}); each mesh axis may "
                        "shard at most one dim once.",
                        what="axes", value=tuple(axes),
                    )
                seen[name] = dim
        init = object.__setattr__
        init(self, "_spec", spec)
        init(self, "_axes", tuple(entry_from_names(names) for names in spec))
        if device_mesh is not None:
            self._check_axes(device_mesh)
        init(self, "_device_mesh", device_mesh)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(
            f"TensorLayout is immutable: cannot set {name!r}. Build a new layout "
            "(layout.with_mesh(mesh) for another mesh).")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"TensorLayout is immutable: cannot delete {name!r}.")

    def __reduce__(self) -> tuple:
        return TensorLayout, (self._axes, self._device_mesh)

    def _check_axes(self, mesh: DeviceMesh) -> None:
        for dim, names in enumerate(self._spec):
            for name in names:
                if name not in mesh.axis_names:
                    raise LayoutError(
                        f"Layout {self._axes} names mesh axis {name!r} on dim {dim}, "
                        f"but the mesh axes are {mesh.axis_names} with shape "
                        f"{mesh.shape}.",
                        what="axes", value=self._axes,
                    )

    @classmethod
    def from_spec(cls, spec: Spec, device_mesh: DeviceMesh | None = None) -> "TensorLayout":
        """Build from a spec (one tuple of names per dim)."""
        return cls(tuple(entry_from_names(tuple(n)) for n in spec), device_mesh)

    @property
    def axes(self) -> tuple[AxisEntry, ...]:
        return self._axes

    @property
    def spec(self) -> Spec:
        """One tuple of mesh axis names per dim, ``()`` for replicated."""
        return self._spec

    @property
    def device_mesh(self) -> DeviceMesh | None:
        return self._device_mesh

    @property
    def rank(self) -> int:
        return len(self._spec)

    def with_mesh(self, device_mesh: DeviceMesh) -> "TensorLayout":
        """The same layout bound to ``device_mesh`` (checks the axis names)."""
        return TensorLayout(self._axes, device_mesh)

    def require_mesh(self) -> DeviceMesh:
        """The bound mesh; ``LayoutError`` when the layout has none."""
        if self._device_mesh is None:
            raise LayoutError(
                f"Layout {self._axes} has no device mesh. Fix: pass "
                "TensorLayout(axes, device_mesh) or call layout.with_mesh(mesh).",
                what="device_mesh", value=self._device_mesh,
            )
        return self._device_mesh

    def shard_count(self, dim: int) -> int:
        """How many slices dim ``dim`` is cut into (product of its axes' sizes)."""
        mesh = self.require_mesh()
        return math.prod([mesh.axis_size(n) for n in self._spec[dim]])  # a list: dynamo

    def check_shape(self, shape: Sequence[int]) -> None:
        """Check that this layout can shard a tensor of ``shape``.

        Raises ``LayoutError`` for a ``shape`` that is not a sequence of
        non-negative ints, on a rank mismatch, and ``ShardingError`` when a
        dim does not divide by its shard count (JAX refuses those arrays).
        """
        try:  # a string or bytes iterates, but is no shape
            dims = None if isinstance(shape, (str, bytes)) else tuple(int(s) for s in shape)
        except (TypeError, ValueError, OverflowError):
            dims = None
        if dims is None or any(d < 0 for d in dims):
            raise LayoutError(
                f"Layout {self._axes}: shape={shape!r} is not a sequence of non-negative "
                "ints. Fix: pass the tensor's shape, e.g. (8, 8).",
                what="shape", value=shape,
            )
        shape = dims
        if len(shape) != self.rank:
            raise LayoutError(
                f"Layout {self._axes} has {self.rank} entries but the tensor has "
                f"rank {len(shape)} (shape {shape}). Fix: give one entry per dim.",
                what="shape", value=shape,
            )
        mesh = self.require_mesh()
        for dim, (size, names) in enumerate(zip(shape, self._spec)):
            count = self.shard_count(dim)
            if size % count:
                sizes = {n: mesh.axis_size(n) for n in names}
                raise IndivisibleError(
                    f"Dim {dim} of shape {shape} has size {size}, which does not "
                    f"divide by {count} (mesh axes {sizes}). Fix: make dim {dim} a "
                    f"multiple of {count}, or shard it over fewer axes.",
                    dim=dim, size=size, axes=tuple(names), shards=count,
                )

    def shards(self, shape: Sequence[int]) -> dict[int, tuple[tuple[int, int], ...]]:
        """JAX's block for each device: device index -> ``[start, stop)`` per dim.

        Device ``i`` is ``mesh.devices.flat[i]``. For a dim over ``(a, b)`` the
        block index is ``coord[a] * size[b] + coord[b]`` (``a`` major), as in
        ``PartitionSpec(("a", "b"))``. Raises like ``check_shape``.
        """
        self.check_shape(shape)
        mesh = self.require_mesh()
        result: dict[int, tuple[tuple[int, int], ...]] = {}
        for device, coord in enumerate(mesh_coords(mesh.shape)):
            bounds = []
            for dim, names in enumerate(self._spec):
                index = 0
                for name in names:
                    axis = mesh.axis_index(name)
                    index = index * mesh.shape[axis] + coord[axis]
                block = shape[dim] // self.shard_count(dim)
                bounds.append((index * block, (index + 1) * block))
            result[device] = tuple(bounds)
        return result

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TensorLayout)
            and self._spec == other._spec
            and self._device_mesh == other._device_mesh
        )

    def __hash__(self) -> int:
        return hash((self._spec, self._device_mesh))

    def __repr__(self) -> str:
        mesh = self._device_mesh
        where = f", mesh={mesh.shape}{mesh.axis_names}" if mesh else ""
        return f"TensorLayout({self._axes}{where})"


def mesh_coords(mesh_shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Coordinates of every device, in ``devices.flat`` order (row major)."""
    coords: list[tuple[int, ...]] = [()]
    for size in mesh_shape:
        coords = [c + (i,) for c in coords for i in range(size)]
    return coords


def spec_without_axis(spec: Spec, axis_name: str) -> Spec:
    """``spec`` with ``axis_name`` removed from whichever dim holds it."""
    return tuple(tuple(n for n in names if n != axis_name) for names in spec)
