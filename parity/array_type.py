"""``ArrayType``: what ``backend.typeof(x)`` returns -- an array's dtype,
shape and, on ``Explicit`` mesh axes, sharding, printed as JAX prints
``jax.typeof(x)``.

| value                                   | ``str``                        |
|-----------------------------------------|--------------------------------|
| (8, 8) over ``P("data", "model")``,     | ``float32[8@data,8@model]``    |
| both axes Explicit                      |                                |
| the same on Auto axes                   | ``float32[8,8]``               |
| ``P(("data", "model"), None)``          | ``float32[8@(data,model),8]``  |
| a shard_map block varying over ``data`` | ``float32[4,2]{V:data}``       |
| ... over ``data`` and ``model``         | ``float32[4,2]{V:(data,model)}``|
| a pending sum over ``model`` (unreduced)| ``float32[8@data,8]{U:model}`` |
"""

from __future__ import annotations

import dataclasses

from parity.axis_types import AxisType
from parity.layout import Spec
from parity.mesh import DeviceMesh


@dataclasses.dataclass(frozen=True)
class ArrayType:
    """``dtype`` (JAX's name: ``"float32"``), ``shape``, ``spec`` (only the
    ``Explicit`` axes, one tuple per dim), ``varying`` (the manual axes a
    ``shard_map`` value varies along, in mesh order) and ``unreduced`` (the
    axes it is a pending sum over, in mesh order)."""

    dtype: str
    shape: tuple[int, ...]
    spec: Spec
    varying: tuple[str, ...] = ()
    unreduced: tuple[str, ...] = ()

    def __str__(self) -> str:
        dims = []
        for size, names in zip(self.shape, self.spec):
            if not names:
                dims.append(f"{size}")
            elif len(names) == 1:
                dims.append(f"{size}@{names[0]}")
            else:
                dims.append(f"{size}@({','.join(names)})")
        out = f"{self.dtype}[{','.join(dims)}]"
        for letter, axes in (("V", self.varying), ("U", self.unreduced)):
            if axes:
                names = axes[0] if len(axes) == 1 else f"({','.join(axes)})"
                out += f"{{{letter}:{names}}}"
        return out


def array_type(dtype: str, shape: tuple[int, ...], spec: Spec, mesh: DeviceMesh | None,
               varying: tuple[str, ...] = (), unreduced: tuple[str, ...] = ()) -> ArrayType:
    """The type of an array of ``dtype`` and global ``shape`` laid out as
    ``spec`` on ``mesh``: the spec keeps only the mesh's ``Explicit`` axes
    (JAX's types name no Auto axis); ``varying`` and ``unreduced`` are put
    in mesh order."""
    explicit = set(mesh.axes_of_type(AxisType.Explicit)) if mesh is not None else set()
    kept = tuple(tuple(n for n in names if n in explicit) for names in spec)
    order = mesh.axis_names if mesh is not None else tuple(varying) + tuple(unreduced)
    return ArrayType(dtype, tuple(int(s) for s in shape), kept,
                     tuple(n for n in order if n in set(varying)),
                     tuple(n for n in order if n in set(unreduced)))
