"""The unmatched-key warning of parity's Keras shim.

Keras replicates a variable no ``LayoutMap`` key matches, without a word: a
map written for ``transformer_layer.*/mlp/kernel`` silently replicates
everything after the layer is renamed (keras-hub#2806). When a step function
is made under a ``ModelParallel`` (``fit`` / ``evaluate`` / ``predict``,
the ``*_on_batch`` methods), ``warn_unmatched_keys`` warns
(``parity.keras_layout.UnmatchedLayoutKeyWarning``) once per layout map and
key that matches none of the model's variables, naming the key and the
nearest variable paths.
"""

from __future__ import annotations

import warnings
import weakref

# id(layout map) -> (weak reference to it, keys already warned about).
_warned: dict[int, tuple[weakref.ref, set[str]]] = {}


def _seen(layout_map) -> set[str]:
    entry = _warned.get(id(layout_map))
    if entry is None or entry[0]() is not layout_map:
        entry = (weakref.ref(layout_map), set())
        _warned[id(layout_map)] = entry
        weakref.finalize(layout_map, _warned.pop, id(layout_map), None)
    return entry[1]


def _rank(layout_map, key):
    axes = getattr(layout_map[key], "axes", None)
    return None if axes is None else len(axes)


def warn_unmatched_keys(model, distribution) -> tuple[str, ...]:
    """Warn once per key of ``distribution``'s layout map that lays out
    none of ``model.weights``; return the keys warned about now."""
    from parity.keras_layout.matching import (
        UnmatchedLayoutKeyWarning,
        nearest_paths,
        unmatched_keys,
    )

    layout_map = getattr(distribution, "_layout_map", None)
    if layout_map is None or not len(layout_map):
        return ()
    paths = [v.path for v in model.weights]
    ranks = {v.path: len(v.shape) for v in model.weights}
    seen = _seen(layout_map)
    new = tuple(k for k in unmatched_keys(layout_map, paths) if k not in seen)
    for key in new:
        seen.add(key)
        warnings.warn(
            f"parity: LayoutMap key {key!r} matches no variable of {model.name!r}; the "
            f"variables it was meant for are replicated. Nearest variable paths: "
            f"{list(nearest_paths(key, paths, ranks=ranks, rank=_rank(layout_map, key)))}. Fix: correct the key, or check "
            "parity.keras_layout.report(model, layout_map).",
            UnmatchedLayoutKeyWarning,
            stacklevel=3,
        )
    return new
