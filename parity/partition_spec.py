"""``PartitionSpec`` (``P``): a layout without a mesh, as JAX writes it.

``P("data", None)`` is the layout ``("data", None)`` on the *ambient* mesh
(the innermost ``backend.set_mesh(mesh)``); it may be shorter than the
array's rank (missing trailing entries are replicated), as in JAX.

```python
with torch_impl.set_mesh(mesh):
    y = torch_impl.reshard(x, parity.P("model", None))
```

JAX 0.10.2's ``unreduced=`` / ``reduced=`` entries are not supported:
passing one raises ``UnsupportedOpError`` (said, not faked).
"""

from __future__ import annotations

from parity.errors import LayoutError, UnsupportedOpError
from parity.layout import AxisEntry, Spec, entry_from_names, normalize_entry


class PartitionSpec:
    """One entry per leading dim: ``None``, a mesh axis name, or a tuple of
    names (major first). Immutable; equal to another with the same entries
    (trailing ``None``s are not ignored, as in JAX's ``==``).

    Raises ``LayoutError`` for a malformed entry or a name used twice, and
    ``UnsupportedOpError`` for ``unreduced=`` / ``reduced=``.
    """

    __slots__ = ("_entries", "_spec")

    def __init__(self, *entries: AxisEntry, unreduced: object = None,
                 reduced: object = None) -> None:
        if unreduced or reduced:
            raise UnsupportedOpError(
                f"PartitionSpec(unreduced={unreduced!r}, reduced={reduced!r}): parity "
                "does not support unreduced or reduced values yet. Fix: reshard to a "
                "spec without them (JAX completes the sum there too).",
                op="PartitionSpec", reason="unreduced values are not supported")
        spec = tuple(normalize_entry(e) for e in entries)
        seen: set[str] = set()
        for names in spec:
            for name in names:
                if name in seen:
                    raise LayoutError(
                        f"Mesh axis {name!r} is used twice in P{tuple(entries)}; each mesh "
                        "axis may shard at most one dim.",
                        what="spec", value=tuple(entries))
                seen.add(name)
        object.__setattr__(self, "_spec", spec)
        object.__setattr__(self, "_entries", tuple(entry_from_names(n) for n in spec))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"PartitionSpec is immutable: cannot set {name!r}.")

    def __reduce__(self) -> tuple:
        return PartitionSpec, self._entries

    @property
    def entries(self) -> tuple[AxisEntry, ...]:
        return self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self):
        return iter(self._entries)

    def spec_for(self, ndim: int) -> Spec:
        """One tuple of names per dim of a rank-``ndim`` array.

        Raises ``LayoutError`` when the spec has more entries than ``ndim``.
        """
        if len(self._spec) > ndim:
            raise LayoutError(
                f"{self!r} has {len(self._spec)} entries but the array has rank {ndim}. "
                "Fix: give at most one entry per dim.",
                what="spec", value=self)
        return self._spec + ((),) * (ndim - len(self._spec))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PartitionSpec) and self._spec == other._spec

    def __hash__(self) -> int:
        return hash(("P", self._spec))

    def __repr__(self) -> str:
        return "P(" + ", ".join(repr(e) for e in self._entries) + ")"


P = PartitionSpec
