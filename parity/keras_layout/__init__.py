"""Layout maps derived from a Keras model, and what a layout map does to one.

* ``layout_map_for(model, mesh)``: a ``keras.distribution.LayoutMap`` with
  Megatron-style tensor parallelism read off the model's own layers
  (``derive.py``);
* ``abstract_model(cls, **config)``: the model's layers and variable
  shapes without allocating its weights, to derive a map for a model too
  large to build (``abstract.py``);
* ``report(model, layout_map)``: per variable the key that matched, its
  layout and its bytes per device, unmatched keys, large variables left
  replicated, the largest device's total (``report.py``);
* ``unmatched_keys`` / ``nearest_paths``: the keys of a layout map that
  match no variable (``matching.py``; parity's Keras shim on torch warns
  with them).

Nothing here is imported by ``import parity``; each function imports Keras
when called.
"""

from parity.keras_layout.abstract import abstract_model
from parity.keras_layout.derive import Derivation, VariableRule, derive, layout_map_for
from parity.keras_layout.matching import (
    UnmatchedLayoutKeyWarning,
    matching_key,
    nearest_paths,
    unmatched_keys,
)
from parity.keras_layout.report import LayoutReport, VariableReport, report

__all__ = [
    "Derivation",
    "LayoutReport",
    "UnmatchedLayoutKeyWarning",
    "VariableReport",
    "VariableRule",
    "abstract_model",
    "derive",
    "layout_map_for",
    "matching_key",
    "nearest_paths",
    "report",
    "unmatched_keys",
]
