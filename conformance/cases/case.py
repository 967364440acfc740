"""The ``Case`` type: one op on one mesh with its operands (``Input``s),
kwargs and whether its gradient is checked; its JSON form (one entry of a
case file, SPEC "Case files"); the short texts case ids are made of; and
``select``, the cases of a run filtered by op, id text and mesh."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Spec = tuple[tuple[str, ...], ...]


@dataclasses.dataclass(frozen=True)
class Input:
    """One operand: ``kind`` is ``array`` (distributed, ``spec`` given),
    ``host`` (plain host array) or ``scalar`` (a Python number)."""

    kind: str
    shape: tuple[int, ...] = ()
    dtype: str = "float32"
    spec: Spec | None = None
    domain: str = "normal"
    values: Any = None  # nested lists, or the scalar

    def to_json(self) -> dict[str, Any]:
        if self.kind == "scalar":
            return {"scalar": self.values}
        out: dict[str, Any] = {"shape": list(self.shape), "dtype": self.dtype,
                               "layout": None if self.spec is None else layout_json(self.spec)}
        if self.domain != "normal":
            out["domain"] = self.domain
        if self.values is not None:
            out["values"] = self.values
        return out


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    op: str
    mesh_shape: tuple[int, ...]
    axis_names: tuple[str, ...]
    inputs: tuple[Input, ...]
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    grad: bool = False
    # One of ``signatures.AXIS_TYPES`` per mesh axis, or None: today's
    # behaviour (the JAX reference on Explicit axes, Auto where JAX finds the
    # op ambiguous; the parity mesh with its default types).
    axis_types: tuple[str, ...] | None = None

    @property
    def mesh_tag(self) -> str:
        return "x".join(str(s) for s in self.mesh_shape)

    @property
    def devices(self) -> int:
        n = 1
        for s in self.mesh_shape:
            n *= s
        return n

    def to_json(self) -> dict[str, Any]:
        mesh: dict[str, Any] = {"shape": list(self.mesh_shape), "axis_names": list(self.axis_names)}
        if self.axis_types is not None:
            mesh["axis_types"] = list(self.axis_types)
        return {
            "id": self.id, "op": self.op, "mesh": mesh,
            "inputs": [i.to_json() for i in self.inputs],
            "kwargs": dict(self.kwargs), "grad": self.grad,
        }


def layout_json(spec: Spec) -> list[Any]:
    """A spec as a case-file layout: ``(("a",), (), ("a","b"))`` -> ``["a", null, ["a","b"]]``."""
    return [None if not n else n[0] if len(n) == 1 else list(n) for n in spec]


def spec_text(spec: Spec | None) -> str:
    """Short form for ids: ``data,_`` ; ``a+b,_`` for a dim over two axes; ``host``."""
    if spec is None:
        return "host"
    if not spec:
        return "()"
    return ",".join("+".join(n) if n else "_" for n in spec)



def select(cases: Iterable[Case], ops: Sequence[str] = (), pattern: str | None = None,
           mesh: str | None = None, limit: int | None = None) -> list[Case]:
    """Filter cases by op names, an id substring and a mesh tag (``2x4``)."""
    out = []
    for c in cases:
        if ops and c.op not in ops:
            continue
        if pattern and pattern not in c.id:
            continue
        if mesh and c.mesh_tag != mesh:
            continue
        out.append(c)
    return out[:limit] if limit else out
