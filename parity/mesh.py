"""``DeviceMesh``: an n-dimensional grid of devices with named axes.

Keras semantics and error messages: empty shape or names, a length mismatch
and a device count mismatch raise ``ValueError`` (``parity.LayoutError``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from parity.axis_types import AxisType, normalize_axis_types
from parity.errors import LayoutError


def _is_sequence(value: object) -> bool:
    if isinstance(value, np.ndarray):
        return value.ndim == 1  # a 0-d or 2-d array is no list of sizes or names
    return isinstance(value, (tuple, list))


def _is_device_sequence(value: object) -> bool:
    if isinstance(value, np.ndarray):
        return value.ndim > 0
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


class DeviceMesh:
    """A grid of devices, one name per axis; an immutable value.

    ```python
    mesh = parity.DeviceMesh((2, 4), ("data", "model"))  # 8 devices
    mesh.axis_size("model")  # 4
    ```

    Device index *i* in placements is ``mesh.devices.flat[i]``. As JAX's
    ``Mesh``, it is frozen once built: ``devices`` is a read-only array,
    attributes cannot be set (``AttributeError``) and the hash is computed
    once, so a mesh is safe as a cache key.

    ``axis_types`` (one ``parity.AxisType`` per axis, or one for all)
    defaults to ``Auto``, as ``jax.sharding.Mesh``'s does; it is part of the
    mesh's value (two meshes that differ only in axis types are not equal,
    as in JAX). ``parity.make_mesh`` defaults to ``Explicit``.

    Raises ``LayoutError`` for an empty shape or empty names, a length
    mismatch, repeated names, ``devices`` that is not a sequence, a device
    count other than ``prod(shape)``, or
    ``axis_types`` that are not one axis type per axis.
    """

    __slots__ = ("_shape", "_axis_names", "_devices", "_device_list", "_hash", "_axis_types")

    def __init__(
        self,
        shape: Sequence[int],
        axis_names: Sequence[str],
        devices: Sequence[Any] | np.ndarray | None = None,
        axis_types: AxisType | Sequence[AxisType] | None = None,
    ) -> None:
        if isinstance(axis_names, str) or not _is_sequence(axis_names):
            raise LayoutError(
                f"axis_names must be a sequence of strings; got {axis_names!r}. "
                "Fix: e.g. axis_names=('data', 'model').",
                what="axis_names", value=axis_names,
            )
        if not _is_sequence(shape):
            raise LayoutError(
                f"shape must be a sequence of ints; got {shape!r}. Fix: e.g. shape=(2, 4).",
                what="shape", value=shape,
            )
        if len(shape) == 0 or len(axis_names) == 0:  # len: a numpy array has no truth value
            raise LayoutError(
                "Shape and axis_names cannot be empty. Received: "
                f"shape={shape}, axis_names={axis_names}",
                what="shape", value=shape,
            )
        if len(shape) != len(axis_names):
            raise LayoutError(
                "Shape and axis_names should have same size. Received: "
                f"shape={shape}, axis_names={axis_names}",
                what="shape", value=shape,
            )
        for name in axis_names:
            if not isinstance(name, str) or not name:
                raise LayoutError(
                    f"Mesh axis names must be non-empty strings. Received: {name!r}",
                    what="axis_names", value=name,
                )
        if len(set(axis_names)) != len(axis_names):
            raise LayoutError(
                f"Mesh axis names must be unique. Received: axis_names={axis_names}",
                what="axis_names", value=axis_names,
            )
        for size in shape:
            if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
                raise LayoutError(
                    f"Mesh axis sizes must be positive integers. Received: shape={shape}",
                    what="shape", value=shape,
                )
        if devices is None:
            from parity.backends import active_backend

            devices = active_backend().list_devices()
        elif not _is_device_sequence(devices):
            raise LayoutError(
                f"devices must be a sequence (or numpy array) of devices; got {devices!r}. "
                "Fix: e.g. devices=parity.backend('torch').list_devices(), or omit it.",
                what="devices", value=devices,
            )
        devices = np.array(devices, dtype=object)
        if int(np.prod(shape)) != int(np.prod(devices.shape)):
            raise LayoutError(
                "Shape does not match the number of devices. Received: "
                f"shape={tuple(shape)}; devices.shape={devices.shape}. Fix: use a "
                f"mesh of {devices.size} devices, or simulate {int(np.prod(shape))}.",
                what="devices", value=devices.shape,
            )
        types = normalize_axis_types(axis_types, len(shape))
        shape = tuple(int(s) for s in shape)
        devices = devices.reshape(shape)  # a copy of the caller's array (np.array above)
        devices.flags.writeable = False
        device_list = tuple(devices.flat)
        init = object.__setattr__
        init(self, "_shape", shape)
        init(self, "_axis_names", tuple(axis_names))
        init(self, "_devices", devices)
        init(self, "_device_list", device_list)
        init(self, "_axis_types", types)
        init(self, "_hash", hash((shape, self._axis_names, device_list, types)))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"DeviceMesh is immutable: cannot set {name!r}. Build a new mesh.")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"DeviceMesh is immutable: cannot delete {name!r}.")

    def __reduce__(self) -> tuple:
        return DeviceMesh, (self._shape, self._axis_names, self._devices.copy(),
                            self._axis_types)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def axis_names(self) -> tuple[str, ...]:
        return self._axis_names

    @property
    def devices(self) -> np.ndarray:
        return self._devices

    @property
    def axis_types(self) -> tuple[AxisType, ...]:
        """One ``AxisType`` per axis (``Auto`` unless given)."""
        return self._axis_types

    def axes_of_type(self, axis_type: AxisType) -> tuple[str, ...]:
        """The names of the axes of type ``axis_type``, in mesh order."""
        return tuple(n for n, t in zip(self._axis_names, self._axis_types) if t == axis_type)

    def with_axis_types(self, axis_types: AxisType | Sequence[AxisType]) -> "DeviceMesh":
        """The same devices and names with other axis types (a new mesh)."""
        return DeviceMesh(self._shape, self._axis_names, self._devices, axis_types)

    @property
    def size(self) -> int:
        return int(np.prod(self._shape))

    def axis_size(self, name: str) -> int:
        """Size of mesh axis ``name``; ``LayoutError`` if it is not an axis."""
        return self._shape[self.axis_index(name)]

    def axis_index(self, name: str) -> int:
        """Position of mesh axis ``name``; ``LayoutError`` if it is not an axis
        (or not a string)."""
        if not isinstance(name, str) or name not in self._axis_names:
            raise LayoutError(
                f"Mesh axis {name!r} is not in the mesh; its axes are "
                f"{self._axis_names} with shape {self._shape}.",
                what="axis", value=name,
            )
        return self._axis_names.index(name)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return (
            isinstance(other, DeviceMesh)
            and self._hash == other._hash
            and self._shape == other._shape
            and self._axis_names == other._axis_names
            and self._device_list == other._device_list
            and self._axis_types == other._axis_types
        )

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        types = ""
        if any(t != AxisType.Auto for t in self._axis_types):
            types = f", axis_types={self._axis_types}"
        return (
            f"DeviceMesh(shape={self._shape}, axis_names={self._axis_names}, "
            f"devices={self._devices.flatten().tolist()}{types})"
        )


def make_mesh(
    axis_shapes: Sequence[int],
    axis_names: Sequence[str],
    *,
    axis_types: AxisType | Sequence[AxisType] | None = None,
    devices: Sequence[Any] | np.ndarray | None = None,
) -> DeviceMesh:
    """A ``DeviceMesh`` as ``jax.make_mesh`` builds one: every axis
    ``Explicit`` unless ``axis_types`` says otherwise, devices from the
    active backend unless given.

    ```python
    mesh = parity.make_mesh((2, 4), ("data", "model"))   # (Explicit, Explicit)
    ```

    Raises like ``DeviceMesh``.
    """
    if axis_types is None:
        axis_types = AxisType.Explicit
    return DeviceMesh(axis_shapes, axis_names, devices, axis_types)
