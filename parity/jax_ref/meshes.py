"""parity's mesh and layout as ``jax.sharding`` values, and back.

| parity                                 | JAX                                   |
|----------------------------------------|---------------------------------------|
| ``DeviceMesh(shape, names, devices)``  | ``Mesh(devices, names, axis_types)``  |
| layout entry ``None`` / ``"a"``        | ``PartitionSpec`` entry ``None``/``"a"`` |
| layout entry ``("a", "b")``            | ``PartitionSpec(("a", "b"))``         |
| ``TensorLayout(axes, mesh)``           | ``NamedSharding(mesh, spec)``         |

``axis_types="explicit"`` (the default, normative: sharding in types) makes
every mesh axis ``AxisType.Explicit``; ``"auto"`` makes it ``AxisType.Auto``
(the compiler chooses, as Keras runs).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from parity.arg_checks import as_parity_mesh, shown
from parity.errors import LayoutError, ParityError
from parity.layout import Spec, TensorLayout, entry_from_names
from parity.jax_ref.devices import device_name, to_jax_device
from parity.mesh import DeviceMesh

AXIS_TYPES = {"explicit": AxisType.Explicit, "auto": AxisType.Auto}
# axis_types=None: the parity mesh's own axis types (parity.AxisType -> JAX's).
_OWN = "mesh"

_mesh_cache: dict[tuple[DeviceMesh, str], Mesh] = {}
_lock = threading.Lock()


def _axis_type(axis_types: str | None) -> str:
    if axis_types is None:
        return _OWN
    key = str(axis_types).lower()
    if key not in AXIS_TYPES:
        raise ParityError(
            f"axis_types={axis_types!r} is not one of {sorted(AXIS_TYPES)}."
        )
    return key


def to_jax_mesh(mesh: DeviceMesh, axis_types: str | None = "explicit") -> Mesh:
    """The ``jax.sharding.Mesh`` of ``mesh`` (cached per mesh and axis types).

    ``axis_types``: ``"explicit"`` (the default: the reference checks JAX's
    explicit rules whatever the parity mesh says) or ``"auto"`` for every
    axis; ``None`` for the parity mesh's own ``axis_types``.

    Devices are looked up by name (``"cpu:3"``) or taken as ``jax.Device``.
    Raises ``LayoutError`` for a device JAX does not have and
    ``ParityError`` for ``axis_types`` other than "explicit" or "auto".
    """
    if not isinstance(mesh, DeviceMesh):
        mesh = as_parity_mesh(mesh, "to_jax_mesh", "mesh")
    key = (mesh, _axis_type(axis_types))
    with _lock:
        found = _mesh_cache.get(key)
    if found is None:
        devices = np.array(
            [to_jax_device(d) for d in mesh.devices.flat], dtype=object
        ).reshape(mesh.shape)
        if key[1] == _OWN:
            types = tuple(getattr(AxisType, t.name) for t in mesh.axis_types)
        else:
            types = (AXIS_TYPES[key[1]],) * len(mesh.shape)
        found = Mesh(devices, mesh.axis_names, axis_types=types)
        with _lock:
            _mesh_cache[key] = found
    return found


def to_parity_mesh(mesh: Mesh) -> DeviceMesh:
    """The ``DeviceMesh`` of a ``jax.sharding.Mesh`` (devices by name).
    Raises ``LayoutError`` naming ``mesh`` when it is not a JAX ``Mesh``."""
    if not isinstance(mesh, Mesh):
        raise LayoutError(
            f"to_parity_mesh: mesh={shown(mesh)} is not a jax.sharding.Mesh. Fix: pass a "
            "JAX mesh (jax_ref.to_jax_mesh(parity_mesh) makes one).", what="mesh", value=mesh)
    names = [device_name(d) for d in mesh.devices.flat]
    return DeviceMesh(tuple(mesh.devices.shape), tuple(mesh.axis_names), names)


def to_partition_spec(spec: Spec) -> PartitionSpec:
    """``(("a",), (), ("b", "c"))`` -> ``PartitionSpec("a", None, ("b", "c"))``."""
    return PartitionSpec(*(entry_from_names(tuple(names)) for names in spec))


def spec_of(partition_spec: PartitionSpec, ndim: int) -> Spec:
    """One tuple of mesh axis names per dim from a ``PartitionSpec``, which may
    be shorter than the rank (missing trailing entries are replicated).

    Raises ``ParityError`` for an unconstrained entry (no fixed layout).
    """
    entries = tuple(partition_spec) + (None,) * (ndim - len(partition_spec))
    spec = []
    for dim, entry in enumerate(entries[:ndim]):
        if entry is None:
            spec.append(())
        elif isinstance(entry, str):
            spec.append((entry,))
        elif isinstance(entry, tuple):
            spec.append(tuple(entry))
        else:
            raise ParityError(
                f"Dim {dim} of {partition_spec} is {entry!r}, which names no fixed "
                "layout (unconstrained)."
            )
    return tuple(spec)


def require_layout(layout: Any) -> TensorLayout:
    """``layout`` if it is a ``TensorLayout`` bound to a mesh.

    Raises ``LayoutError`` otherwise (with the fix).
    """
    if not isinstance(layout, TensorLayout):
        raise LayoutError(
            f"Expected a parity.TensorLayout, got {type(layout).__name__}: "
            f"{layout!r}. Fix: parity.TensorLayout(axes, device_mesh).",
            what="layout", value=layout,
        )
    layout.require_mesh()
    return layout


def to_named_sharding(layout: TensorLayout, axis_types: str | None = "explicit") -> NamedSharding:
    """The ``NamedSharding`` of ``layout`` on its mesh.

    Raises ``LayoutError`` when ``layout`` is not a ``TensorLayout`` or has
    no mesh, and like ``to_jax_mesh``.
    """
    layout = require_layout(layout)
    return NamedSharding(
        to_jax_mesh(layout.device_mesh, axis_types), to_partition_spec(layout.spec)
    )


def _to_backend_mesh(device_mesh: DeviceMesh) -> Mesh:
    """Keras's name for ``to_jax_mesh`` (explicit axes). Raises
    ``LayoutError`` for anything that is not a parity or Keras ``DeviceMesh``."""
    return to_jax_mesh(as_parity_mesh(device_mesh, "_to_backend_mesh"))


def _to_backend_layout(tensor_layout: TensorLayout) -> NamedSharding:
    """Keras's name for ``to_named_sharding`` (explicit axes)."""
    return to_named_sharding(tensor_layout)
