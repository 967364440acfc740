"""The spec operations every rule uses.

``sizes`` maps a mesh axis name to its size; a name missing from it is a
caller's bug and raises ``KeyError``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from parity.layout import Spec

AxisSizes = Mapping[str, int]


def shard_count(names: Sequence[str], sizes: AxisSizes) -> int:
    """How many shards the mesh axes ``names`` cut a dim into."""
    return math.prod([sizes[n] for n in names])  # a list: dynamo cannot trace prod(generator)


def fit_to_shape(spec: Spec, shape: Sequence[int], sizes: AxisSizes) -> Spec:
    """``spec`` with the names dropped from dims they do not divide evenly
    (JAX refuses uneven shards; a replicated dim is the safe choice). Of a
    dim's names the leading ones that still divide are kept."""
    out = []
    for names, size in zip(spec, shape):
        kept: tuple[str, ...] = ()
        for n in names:
            if size % shard_count(kept + (n,), sizes) == 0:
                kept = kept + (n,)
            else:
                break
        out.append(kept)
    return tuple(out)


def dedupe(spec: Spec, used: Iterable[str] = ()) -> Spec:
    """``spec`` with each mesh axis kept only at its first use (JAX forbids
    an axis on two dims); names in ``used`` are dropped everywhere."""
    seen = set(used)
    out = []
    for names in spec:
        kept = tuple(n for n in names if n not in seen)
        seen.update(kept)
        out.append(kept)
    return tuple(out)


def replicate_dims(spec: Spec, dims: Iterable[int]) -> Spec:
    """``spec`` with the dims ``dims`` (non-negative) replicated."""
    dims = set(dims)
    return tuple(() if d in dims else names for d, names in enumerate(spec))
