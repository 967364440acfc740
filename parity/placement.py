"""``Placement``: where each slice of a global array lives.

What ``describe(x)`` returns on every backend. Two arrays have the same
placement when ``spec``, ``shape`` and ``shards`` are equal (``==``); dtype,
mesh and pending axes are carried for reports but not compared by ``==``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

Bounds = tuple[tuple[int, int], ...]


class Shards(Mapping):
    """A read-only mapping device index -> ``Bounds``, sorted by device;
    equal to any mapping with the same items, hashable."""

    __slots__ = ("_items", "_hash")

    def __init__(self, items: Mapping[int, Bounds]) -> None:
        norm = {int(d): tuple((int(a), int(b)) for a, b in bounds) for d, bounds in items.items()}
        object.__setattr__(self, "_items", dict(sorted(norm.items())))
        object.__setattr__(self, "_hash", hash(tuple(self._items.items())))

    def __getitem__(self, device: int) -> Bounds:
        return self._items[device]

    def __iter__(self) -> Iterator[int]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Placement shards are immutable: cannot set {name!r}.")

    def __reduce__(self) -> tuple:
        return Shards, (self._items,)

    def __repr__(self) -> str:
        return repr(self._items)


@dataclasses.dataclass(frozen=True)
class Placement:
    """Shape, layout and per-device blocks of one distributed array.

    ``shards[i]`` is the ``[start, stop)`` range per dim held by device ``i``
    (``mesh.devices.flat[i]``; torch rank ``i``). ``pending`` names mesh axes
    with an unresolved reduction; parity never returns an array with any.
    Frozen: fields cannot be set and ``shards`` is a read-only ``Shards``.
    """

    shape: tuple[int, ...]
    dtype: str = dataclasses.field(compare=False)
    mesh_shape: tuple[int, ...] = dataclasses.field(compare=False)
    axis_names: tuple[str, ...] = dataclasses.field(compare=False)
    spec: tuple[tuple[str, ...], ...]
    shards: Mapping[int, Bounds]
    pending: tuple[str, ...] = dataclasses.field(default=(), compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shards", Shards(self.shards))
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "spec", tuple(tuple(n) for n in self.spec))
        object.__setattr__(self, "mesh_shape", tuple(int(s) for s in self.mesh_shape))
        object.__setattr__(self, "axis_names", tuple(self.axis_names))
        object.__setattr__(self, "pending", tuple(self.pending))

    def __hash__(self) -> int:
        return hash((self.shape, self.spec, self.shards))

    def to_json(self) -> dict[str, Any]:
        """The report form: lists and string device keys."""
        return {
            "shape": list(self.shape),
            "dtype": self.dtype,
            "mesh_shape": list(self.mesh_shape),
            "axis_names": list(self.axis_names),
            "spec": [list(n) for n in self.spec],
            "shards": {
                str(d): [list(b) for b in bounds] for d, bounds in self.shards.items()
            },
            "pending": list(self.pending),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Placement":
        return cls(
            shape=tuple(data["shape"]),
            dtype=data.get("dtype", ""),
            mesh_shape=tuple(data.get("mesh_shape", ())),
            axis_names=tuple(data.get("axis_names", ())),
            spec=tuple(tuple(n) for n in data["spec"]),
            shards={int(d): tuple(map(tuple, b)) for d, b in data["shards"].items()},
            pending=tuple(data.get("pending", ())),
        )

    def differences(self, other: "Placement") -> list[str]:
        """Human-readable reasons why ``self != other`` (empty when equal)."""
        out = []
        if self.shape != other.shape:
            out.append(f"shape {self.shape} != {other.shape}")
        if self.spec != other.spec:
            out.append(f"spec {self.spec} != {other.spec}")
        for device in sorted(set(self.shards) | set(other.shards)):
            mine, theirs = self.shards.get(device), other.shards.get(device)
            if mine != theirs:
                out.append(f"device {device} holds {mine} != {theirs}")
        return out
