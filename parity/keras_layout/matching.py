"""Which key of a Keras ``LayoutMap`` lays out which variable, and the keys
that lay out none.

Keras's lookup (``keras.distribution.LayoutMap.__getitem__``): the key equal
to the path, else the one key that ``re.fullmatch``-es it (two raise
``ValueError``), else nothing, and the variable is replicated without a
word. A key that matches no variable (a renamed layer, keras-hub#2806) is
what ``unmatched_keys`` finds.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any


class UnmatchedLayoutKeyWarning(UserWarning):
    """A layout map key that matches no variable of the model: every
    variable it was meant for is replicated."""


def matching_key(layout_map: Mapping[str, Any], path: str) -> str | None:
    """The key of ``layout_map`` Keras uses for the variable at ``path``:
    the equal key, else the one key whose regex fully matches, else ``None``.

    Raises ``ValueError`` (as Keras does) when several keys match.
    """
    keys = list(layout_map)  # not ``in layout_map``: Keras's lookup never raises KeyError
    if path in keys:
        return path
    hits = [k for k in keys if re.fullmatch(k, path)]
    if len(hits) > 1:
        raise ValueError(
            f"Path {path!r} matches several layout map keys: {hits}. Fix: make each "
            "variable path match at most one key."
        )
    return hits[0] if hits else None


def unmatched_keys(layout_map: Mapping[str, Any], paths: Iterable[str]) -> tuple[str, ...]:
    """The keys of ``layout_map`` that lay out none of ``paths``, in the
    map's order."""
    used = set()
    for path in paths:
        key = matching_key(layout_map, path)
        if key is not None:
            used.add(key)
    return tuple(k for k in layout_map if k not in used)


def _literal(key: str) -> str:
    """A regex key's literal text (metacharacters dropped), for similarity."""
    return re.sub(r"\\d\+?|\.\*|[\\^$.*+?()\[\]{}|]", "", key)


def nearest_paths(key: str, paths: Iterable[str], n: int = 3, *,
                  ranks: Mapping[str, int] | None = None, rank: int | None = None
                  ) -> tuple[str, ...]:
    """The ``n`` paths most similar to ``key`` (``difflib`` ratio on the
    key's literal text), best first, one per layer kind (``layer_0/x`` and
    ``layer_1/x`` count once). With ``ranks`` (path -> rank) and ``rank``
    (the key's layout rank), only paths of that rank compete."""
    paths = list(dict.fromkeys(paths))
    if ranks is not None and rank is not None:
        paths = [p for p in paths if ranks.get(p) == rank] or paths
    literal = _literal(key)
    scored = sorted(paths, key=lambda p: -difflib.SequenceMatcher(None, literal, p).ratio())
    best, kinds = [], set()
    for p in scored:
        kind = re.sub(r"_\d+(?=/)", "", p)
        if kind not in kinds:
            kinds.add(kind)
            best.append(p)
    return tuple(best[:n])
