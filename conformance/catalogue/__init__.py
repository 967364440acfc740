"""The op catalogue: every op once, its JAX and its torch expression side by
side, all in this package, one module per family:

| module        | group(s)            | what                                          |
|---------------|---------------------|-----------------------------------------------|
| ``entry``     |                     | ``Op``, ``Arg``, ``ShapeSet``, tolerance classes |
| ``elementwise``| unary, binary      | math, activations, comparisons, logical, bitwise |
| ``reductions``| reduction           | reductions, scans, sorting, selection         |
| ``linalg``    | linalg              | matmul, einsum, decompositions, products      |
| ``shape``     | shape               | data movement, indexing, gather and scatter   |
| ``nn``        | nn                  | softmax, norms, losses, convolution, attention |
| ``api``       | api                 | SPEC's API functions through backend module ``B`` |
| ``explicit``  | explicit            | Explicit axes, ``reshard``, ``shard_map`` + ``lax`` |

Each family module's ``OPS`` holds its broad entries (several shape sets,
indivisible shapes, larger budgets) and its JAX twins of PyTorch OpInfo ops
(``entry.TWIN_BUDGET``). This package imports neither torch nor JAX.
"""

from __future__ import annotations

import difflib

from conformance.catalogue import api, elementwise, explicit, linalg, nn, reductions, shape
from conformance.catalogue.entry import (GRAD_CLASS, TOLERANCES, TWIN_BUDGET, Arg, Op, ShapeSet,
                                         tolerance)

__all__ = ["API_FUNCTIONS", "FAMILIES", "GRAD_CLASS", "GROUPS", "OPS", "TOLERANCES",
           "TWIN_BUDGET", "Arg", "DuplicateOpError", "Op", "ShapeSet", "closest_ops", "get_op",
           "tolerance", "unknown_op"]

FAMILIES = (elementwise, reductions, linalg, shape, nn, api, explicit)
GROUPS = ("unary", "binary", "reduction", "linalg", "shape", "nn", "api", "explicit")


class DuplicateOpError(ValueError):
    """Two family modules (or one, twice) define the op ``name``."""

    def __init__(self, *, name: str, modules: tuple[str, ...]) -> None:
        self.name, self.modules = name, modules
        super().__init__(f"op {name!r} is defined more than once (in {', '.join(modules)}); "
                         "each op lives in exactly one family module")


def _collect() -> dict[str, Op]:
    """Every family's ops by name. Raises ``DuplicateOpError`` when a name
    repeats, and ``ValueError`` naming an op whose group is not in ``GROUPS``."""
    ops: dict[str, Op] = {}
    where: dict[str, str] = {}
    for family in FAMILIES:
        for op in family.OPS:
            if op.name in ops:
                raise DuplicateOpError(name=op.name, modules=(where[op.name], family.__name__))
            if op.group not in GROUPS:
                raise ValueError(f"op {op.name!r} ({family.__name__}): group {op.group!r} is "
                                 f"not one of {GROUPS}")
            ops[op.name], where[op.name] = op, family.__name__
    return ops


OPS: dict[str, Op] = _collect()
API_FUNCTIONS = tuple(name for name, op in OPS.items() if op.group == "api")


def closest_ops(name: object, n: int = 3) -> list[str]:
    """Up to ``n`` catalogue op names closest to ``name`` (``difflib``), best first."""
    return difflib.get_close_matches(str(name), list(OPS), n=n, cutoff=0.6)


def unknown_op(name: object) -> str:
    """``'matmull' is not an op of the catalogue; did you mean matmul?`` (or,
    with nothing close, where the list is): never the whole list inline."""
    near = closest_ops(name)
    hint = f"did you mean {' or '.join(near)}?" if near else "no op has a close name"
    return (f"{name!r} is not an op of the catalogue; {hint} (`parity ops` lists the "
            f"{len(OPS)} ops)")


def get_op(name: str) -> Op:
    """The catalogue entry ``name``. Raises ``KeyError`` with ``unknown_op``'s
    message (the closest names) for a name not in the catalogue."""
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(unknown_op(name)) from None
