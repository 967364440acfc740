"""The ambient mesh: ``set_mesh(mesh)`` and what a ``P(...)`` resolves to.

``set_mesh`` behaves as ``jax.set_mesh`` (JAX 0.10.2): the call itself makes
``mesh`` the calling thread's ambient mesh, until the next call; used as
``with set_mesh(mesh):`` the block's exit restores the mesh that was ambient
when ``set_mesh`` was called (blocks nest; another thread sees its own
value, ``None`` until it sets one). ``set_mesh(None)`` clears it. Each
backend's ``set_mesh`` wraps this one (the JAX reference also calls
``jax.set_mesh`` on the JAX mesh).
"""

from __future__ import annotations

import threading
from typing import Any

from parity.axis_types import AxisType
from parity.errors import LayoutError
from parity.layout import TensorLayout
from parity.mesh import DeviceMesh
from parity.partition_spec import PartitionSpec


class _State(threading.local):
    def __init__(self) -> None:
        self.mesh: DeviceMesh | None = None


_state = _State()


def check_mesh(mesh: object) -> DeviceMesh | None:
    """``mesh`` if ``set_mesh`` can take it: a ``parity.DeviceMesh`` without
    Manual axes, or ``None``. Raises ``LayoutError`` otherwise (a Manual
    axis: JAX's ``set_mesh`` refuses it too; ``shard_map`` makes axes
    Manual)."""
    if mesh is None:
        return None
    if not isinstance(mesh, DeviceMesh):
        raise LayoutError(
            f"set_mesh needs a parity.DeviceMesh or None, got {type(mesh).__name__}: {mesh!r}. "
            "Fix: parity.make_mesh(shape, names) or parity.DeviceMesh(...).",
            what="mesh", value=mesh)
    manual = mesh.axes_of_type(AxisType.Manual)
    if manual:
        raise LayoutError(
            f"set_mesh: {mesh} has Manual axes {manual}; JAX's set_mesh refuses them too. "
            "Fix: make those axes Explicit or Auto; shard_map makes axes Manual inside its body.",
            what="mesh", value=mesh)
    return mesh


class set_mesh:
    """Make ``mesh`` this thread's ambient mesh, as ``jax.set_mesh`` does:
    a plain call sets it (until the next call; ``set_mesh(None)`` clears
    it); ``with set_mesh(mesh):`` sets it for the block and restores, on
    exit, the mesh that was ambient before the call. ``__enter__`` gives
    ``mesh``.

    Raises ``LayoutError`` for a value that is not a ``parity.DeviceMesh``
    or ``None``, and for a mesh with Manual axes.
    """

    __slots__ = ("mesh", "_previous")

    def __init__(self, mesh: DeviceMesh | None) -> None:
        self.mesh = check_mesh(mesh)
        self._previous = _state.mesh
        _state.mesh = self.mesh

    def __enter__(self) -> DeviceMesh | None:
        return self.mesh

    def __exit__(self, *exc: Any) -> None:
        _state.mesh = self._previous


def get_mesh() -> DeviceMesh | None:
    """This thread's ambient mesh, or ``None``."""
    return _state.mesh


def to_layout(spec_or_layout: object, ndim: int, what: str) -> TensorLayout:
    """A bound ``TensorLayout`` for an array of rank ``ndim``: a bound
    ``TensorLayout`` as it is, a ``PartitionSpec`` on the ambient mesh.

    Raises ``LayoutError`` for anything else, for a ``P`` with no ambient
    mesh or naming an axis the mesh lacks, and for a rank mismatch.
    """
    if isinstance(spec_or_layout, TensorLayout):
        spec_or_layout.require_mesh()
        if spec_or_layout.rank != ndim:
            raise LayoutError(
                f"{what}: layout {spec_or_layout.axes} has {spec_or_layout.rank} entries but "
                f"the array has rank {ndim}. Fix: one entry per dim.",
                what=what, value=spec_or_layout)
        return spec_or_layout
    if isinstance(spec_or_layout, PartitionSpec):
        mesh = get_mesh()
        if mesh is None:
            raise LayoutError(
                f"{what}: {spec_or_layout!r} needs an ambient mesh. Fix: call "
                "backend.set_mesh(mesh) (or run inside `with backend.set_mesh(mesh):`), or pass "
                "parity.TensorLayout(axes, mesh).",
                what=what, value=spec_or_layout)
        return TensorLayout.from_spec(spec_or_layout.spec_for(ndim), mesh)
    raise LayoutError(
        f"{what}: expected a parity.P(...) or a parity.TensorLayout, got "
        f"{type(spec_or_layout).__name__}: {spec_or_layout!r}.",
        what=what, value=spec_or_layout)


def resolve(layout: object, ndim: int, what: str) -> object:
    """``layout`` with a ``parity.P`` resolved on the ambient mesh for an
    array of rank ``ndim`` (``to_layout``); anything else as given (the
    caller checks it). Raises ``LayoutError`` for a ``P`` with no ambient
    mesh, too many entries or an axis the mesh lacks, and for a ``P`` with
    ``unreduced=`` (a layout holds no pending sum: ``device_put`` and
    ``reshard`` make unreduced values)."""
    if not isinstance(layout, PartitionSpec):
        return layout
    if layout.unreduced:
        raise LayoutError(
            f"{what}: {layout!r} is an unreduced type, not a layout. Fix: "
            "backend.device_put(x, P(..., unreduced=...)) or backend.reshard.",
            what=what, value=layout)
    return to_layout(layout, ndim, what)


def mesh_for_spec(spec: PartitionSpec, own: DeviceMesh | None, what: str) -> DeviceMesh:
    """The mesh a ``P`` given where the layout's rank is not known resolves
    on: the ambient mesh, else ``own`` (the mesh of the map it goes into).
    Raises ``LayoutError`` when there is neither, or when both are set and
    differ."""
    ambient = get_mesh()
    if ambient is not None and own is not None and ambient != own:
        raise LayoutError(
            f"{what}: {spec!r} would resolve on the ambient mesh {ambient} but the map is "
            f"on {own}. Fix: set the value outside that set_mesh block, or use the map's mesh.",
            what=what, value=spec)
    mesh = ambient if ambient is not None else own
    if mesh is None:
        raise LayoutError(
            f"{what}: {spec!r} needs an ambient mesh. Fix: call backend.set_mesh(mesh) "
            "(or run inside `with backend.set_mesh(mesh):`), or give the map a device_mesh.",
            what=what, value=spec)
    return mesh
