"""Layout entries and specs, the vocabulary ``TensorLayout`` and
``PartitionSpec`` share: an entry is ``None``, ``"a"`` or ``("a", "b")``;
a ``Spec`` is one tuple of mesh axis names per tensor dim.

Below both ``parity.layout`` and ``parity.partition_spec`` (which import
it), so neither imports the other for these.
"""

from __future__ import annotations

from typing import Union

from parity.errors import LayoutError

AxisEntry = Union[None, str, tuple[str, ...]]
Spec = tuple[tuple[str, ...], ...]


def normalize_entry(entry: object) -> tuple[str, ...]:
    """``None`` -> ``()``, ``"a"`` -> ``("a",)``, ``["a", "b"]`` -> ``("a", "b")``.

    Raises ``LayoutError`` for anything else (numbers, empty names).
    """
    if entry is None:
        return ()
    if isinstance(entry, str):
        names: tuple[object, ...] = (entry,)
    elif isinstance(entry, (tuple, list)):
        names = tuple(entry)
    else:
        raise LayoutError(
            f"Layout entry {entry!r} is not None, a mesh axis name or a tuple of "
            "names. Fix: write e.g. None, 'model' or ('data', 'model').",
            what="layout entry", value=entry,
        )
    for name in names:
        if not isinstance(name, str) or not name:
            raise LayoutError(
                f"Layout entry {entry!r} holds {name!r}, which is not a mesh "
                "axis name (a non-empty string).",
                what="layout entry", value=entry,
            )
    return names  # type: ignore[return-value]


def entry_from_names(names: tuple[str, ...]) -> AxisEntry:
    """Inverse of ``normalize_entry``: ``()`` -> None, one name -> str."""
    if not names:
        return None
    if len(names) == 1:
        return names[0]
    return tuple(names)
