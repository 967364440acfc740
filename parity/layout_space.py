"""Every layout a tensor can have on a mesh: for tests and case generation."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from parity.layout import Spec


def all_specs(axis_names: Sequence[str], rank: int) -> Iterator[Spec]:
    """Each spec of a rank-``rank`` tensor: every assignment of each mesh axis
    to one dim or to none, and every order of the axes on a dim.

    On a 3-axis mesh a rank-3 tensor has 106 specs; a rank-0 tensor
    has only ``()``.
    """
    axis_names = tuple(axis_names)
    seen: set[Spec] = set()
    for assignment in itertools.product(range(-1, rank), repeat=len(axis_names)):
        groups = [
            [n for n, d in zip(axis_names, assignment) if d == dim] for dim in range(rank)
        ]
        for orders in itertools.product(*(itertools.permutations(g) for g in groups)):
            spec = tuple(tuple(o) for o in orders)
            if spec not in seen:
                seen.add(spec)
                yield spec
