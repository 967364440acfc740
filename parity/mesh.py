"""``DeviceMesh``: an n-dimensional grid of devices with named axes.

Keras semantics and error messages: empty shape or names, a length mismatch
and a device count mismatch raise ``ValueError`` (``parity.LayoutError``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from parity.errors import LayoutError


def _is_sequence(value: object) -> bool:
    return isinstance(value, (tuple, list, np.ndarray))


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

    Raises ``LayoutError`` for an empty shape or empty names, a length
    mismatch, repeated names, or a device count other than ``prod(shape)``.
    """

    __slots__ = ("_shape", "_axis_names", "_devices", "_device_list", "_hash")

    def __init__(
        self,
        shape: Sequence[int],
        axis_names: Sequence[str],
        devices: Sequence[Any] | np.ndarray | None = None,
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
        if not shape or not axis_names:
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
        devices = np.array(devices, dtype=object)
        if int(np.prod(shape)) != int(np.prod(devices.shape)):
            raise LayoutError(
                "Shape does not match the number of devices. Received: "
                f"shape={tuple(shape)}; devices.shape={devices.shape}. Fix: use a "
                f"mesh of {devices.size} devices, or simulate {int(np.prod(shape))}.",
                what="devices", value=devices.shape,
            )
        shape = tuple(int(s) for s in shape)
        devices = devices.reshape(shape)  # a copy of the caller's array (np.array above)
        devices.flags.writeable = False
        device_list = tuple(devices.flat)
        init = object.__setattr__
        init(self, "_shape", shape)
        init(self, "_axis_names", tuple(axis_names))
        init(self, "_devices", devices)
        init(self, "_device_list", device_list)
        init(self, "_hash", hash((shape, self._axis_names, device_list)))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"DeviceMesh is immutable: cannot set {name!r}. Build a new mesh.")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"DeviceMesh is immutable: cannot delete {name!r}.")

    def __reduce__(self) -> tuple:
        return DeviceMesh, (self._shape, self._axis_names, self._devices.copy())

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
    def size(self) -> int:
        return int(np.prod(self._shape))

    def axis_size(self, name: str) -> int:
        """Size of mesh axis ``name``; ``LayoutError`` if it is not an axis."""
        return self._shape[self.axis_index(name)]

    def axis_index(self, name: str) -> int:
        """Position of mesh axis ``name``; ``LayoutError`` if it is not an axis."""
        if name not in self._axis_names:
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
        )

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return (
            f"DeviceMesh(shape={self._shape}, axis_names={self._axis_names}, "
            f"devices={self._devices.flatten().tolist()})"
        )
