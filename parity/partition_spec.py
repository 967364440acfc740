"""``PartitionSpec`` (``P``): a layout without a mesh, as JAX writes it.

``P("data", None)`` is the layout ``("data", None)`` on the *ambient* mesh
(``backend.set_mesh(mesh)``, called or as a ``with`` block); it may be
shorter than the array's rank (missing trailing entries are replicated), as
in JAX. ``parity.TensorLayout(P(...), mesh)`` binds it to ``mesh`` instead
(JAX's ``NamedSharding(mesh, P(...))``).

```python
with torch_impl.set_mesh(mesh):
    y = torch_impl.reshard(x, parity.P("model", None))
```

``unreduced={"model"}`` types a value as a pending sum over those mesh
axes, as in JAX (``float32[8@data,8]{U:model}``): ``reshard`` into and out
of it, and a contraction's ``out_sharding=`` keeps its sum pending. JAX's
``reduced=`` is not supported: passing one raises ``UnsupportedOpError``.
"""

from __future__ import annotations

from parity.errors import LayoutError, UnsupportedOpError
from parity.spec_entries import AxisEntry, Spec, entry_from_names, normalize_entry


class PartitionSpec:
    """One entry per leading dim: ``None``, a mesh axis name, or a tuple of
    names (major first). Immutable; equal to another with the same entries
    (trailing ``None``s are not ignored, as in JAX's ``==``).

    ``unreduced`` names the mesh axes the value is a pending sum over (a
    set of names, as JAX takes it; ``.unreduced`` is a frozenset).

    Raises ``LayoutError`` for a malformed entry, a name used twice, an
    ``unreduced`` that is not a collection of names or names an axis that
    also shards a dim (JAX's ``ValueError``), and ``UnsupportedOpError`` for
    ``reduced=``.
    """

    __slots__ = ("_entries", "_spec", "_unreduced")

    def __init__(self, *entries: AxisEntry, unreduced: object = None,
                 reduced: object = None) -> None:
        if reduced:
            raise UnsupportedOpError(
                f"PartitionSpec(reduced={reduced!r}): parity does not support JAX's reduced "
                "values. Fix: leave reduced= out (the value is then replicated).",
                op="PartitionSpec", reason="reduced values are not supported")
        pending = _unreduced_names(unreduced, entries)
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
        if seen & pending:
            raise LayoutError(
                f"P{tuple(entries)} shards a dim over {sorted(seen & pending)} and is unreduced "
                f"over it too (unreduced={set(pending)}); an axis is one or the other (JAX's "
                "ValueError: partitions cannot overlap with unreduced axes). Fix: drop the axis "
                "from the entries or from unreduced.",
                what="spec", value=tuple(entries))
        object.__setattr__(self, "_unreduced", pending)
        object.__setattr__(self, "_spec", spec)
        object.__setattr__(self, "_entries", tuple(entry_from_names(n) for n in spec))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"PartitionSpec is immutable: cannot set {name!r}.")

    def __reduce__(self) -> tuple:
        if self._unreduced:
            return _with_unreduced, (self._entries, tuple(sorted(self._unreduced)))
        return PartitionSpec, self._entries

    @property
    def entries(self) -> tuple[AxisEntry, ...]:
        return self._entries

    @property
    def unreduced(self) -> frozenset[str]:
        """The mesh axes the value is a pending sum over (JAX's ``unreduced``)."""
        return self._unreduced

    def without_unreduced(self) -> "PartitionSpec":
        """The same entries, nothing unreduced: what ``reshard`` to complete the sum takes."""
        return PartitionSpec(*self._entries)

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
        return (isinstance(other, PartitionSpec) and self._spec == other._spec
                and self._unreduced == other._unreduced)

    def __hash__(self) -> int:
        return hash(("P", self._spec, self._unreduced))

    def __repr__(self) -> str:
        parts = [repr(e) for e in self._entries]
        if self._unreduced:
            parts.append("unreduced={" + ", ".join(repr(n) for n in sorted(self._unreduced)) + "}")
        return "P(" + ", ".join(parts) + ")"


def _unreduced_names(unreduced: object, entries: tuple) -> frozenset[str]:
    if unreduced is None:
        return frozenset()
    if isinstance(unreduced, str) or not isinstance(unreduced, (set, frozenset, tuple, list)) \
            or not all(isinstance(n, str) for n in unreduced):
        raise LayoutError(
            f"P{tuple(entries)}: unreduced={unreduced!r} must be a set of mesh axis names. "
            f"Fix: unreduced={{{unreduced!r}}} for one axis.",
            what="unreduced", value=unreduced)
    return frozenset(unreduced)


def _with_unreduced(entries: tuple, unreduced: tuple) -> PartitionSpec:
    return PartitionSpec(*entries, unreduced=set(unreduced))


P = PartitionSpec
