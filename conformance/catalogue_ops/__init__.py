"""More catalogue entries, one module per family (the first 55 ops are in
``conformance.catalogue``). Each module's ``ops()`` returns its ``Op`` list;
``catalogue`` appends them after its own.

Entries here are JAX twins of PyTorch OpInfo ops: the JAX expression is the
same function (same defaults, rounding, ``ddof``/``correction``...), not an
approximation; where the two libraries differ in a default, the expression
states the argument on both sides. They run a smaller default budget than
the first 55 (``NEW_BUDGET``: layout combinations per mesh (8,), (2,4),
(2,2,2)), on divisible shapes only.
"""

from __future__ import annotations

NEW_BUDGET = (1, 2, 1)


def all_ops() -> list:
    """Every entry of every family module, in a fixed order."""
    from conformance.catalogue_ops import elementwise, linalg_nn, reductions, shape

    return [*elementwise.ops(), *reductions.ops(), *shape.ops(), *linalg_nn.ops()]
