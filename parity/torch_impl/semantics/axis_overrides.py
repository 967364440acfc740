"""Which mesh axes this thread types otherwise than the mesh does: the
state behind ``auto_axes`` / ``explicit_axes`` (``explicit/axis_scope.py``),
read by the Explicit-axes check of ``jax_semantics()``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from parity.axis_types import AxisType
from parity.mesh import DeviceMesh


class _Overrides(threading.local):
    def __init__(self) -> None:
        self.stack: list[dict[str, AxisType]] = []


_overrides = _Overrides()


def active() -> bool:
    """Whether an ``auto_axes`` / ``explicit_axes`` override runs on this thread."""
    return bool(_overrides.stack)


def effective_types(mesh: DeviceMesh) -> tuple[AxisType, ...]:
    """``mesh``'s axis types with this thread's overrides applied (no new
    mesh is built: ``torch.compile`` traces this)."""
    if not _overrides.stack:
        return mesh.axis_types
    types = dict(zip(mesh.axis_names, mesh.axis_types))
    for layer in _overrides.stack:
        types.update({a: t for a, t in layer.items() if a in types})
    return tuple(types[a] for a in mesh.axis_names)


def effective(mesh: DeviceMesh) -> DeviceMesh:
    """``mesh`` with this thread's overrides applied to its axis types."""
    new = effective_types(mesh)
    return mesh if new == mesh.axis_types else mesh.with_axis_types(new)


@contextlib.contextmanager
def overridden(types: dict[str, AxisType]) -> Iterator[None]:
    """Within the block, the axes named in ``types`` have those types on this thread."""
    _overrides.stack.append(dict(types))
    try:
        yield
    finally:
        _overrides.stack.pop()
