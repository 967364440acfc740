"""Each op's case-file signature, derived from its catalogue entry (never
written by hand, so it cannot drift from what the runners evaluate).

* inputs: exactly ``len(op.args)``; each input's default dtype and value
  domain are the ``Arg``'s.
* kwargs: the names that appear in ``op.variants``; a name in every variant
  is required (the expression uses it), the others optional. A kwarg's
  JSON types are those of its values across the variants (``axis``: integer
  or null); ``op`` (a collective's reduction) takes one of the values any op
  of the catalogue uses; ``target`` is a layout; ``axis_name`` a mesh axis
  name (a wrong name is kept: the backends must reject it, invalid-layout).

``json_schema()`` is the JSON Schema of a case file built from these
signatures (``docs/case-file.schema.json`` is its checked-in copy).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from conformance.catalogue import OPS, Op
from conformance.records.values import DTYPES

SCHEMA_ID = "https://parity.invalid/case-file.schema.json"
# A case mesh's optional ``axis_types`` (``parity.AxisType`` values, JAX's
# names lower-cased); absent: today's behaviour (see ``cases.Case``).
AXIS_TYPES = ("explicit", "auto", "manual")

LAYOUT_SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {"anyOf": [{"type": "null"}, {"type": "string", "minLength": 1},
                        {"type": "array", "items": {"type": "string", "minLength": 1},
                         "minItems": 1}]},
    "description": "one entry per dim: null (replicated), a mesh axis name, or a list "
                   "of names (the dim split over several axes, first name major)",
}


@dataclasses.dataclass(frozen=True)
class Kwarg:
    """One keyword argument of an op: its JSON types and, for a choice, the
    values allowed."""

    name: str
    types: tuple[str, ...]
    required: bool
    choices: tuple[Any, ...] = ()
    examples: tuple[Any, ...] = ()

    def describe(self) -> str:
        """``axis: integer or null (required; e.g. 0, null)``."""
        kinds = " or ".join(self.types)
        if self.choices:
            kinds = "one of " + ", ".join(repr(c) for c in self.choices)
        extra = "required" if self.required else "optional"
        if self.examples and not self.choices:
            extra += "; e.g. " + ", ".join(_json(v) for v in self.examples)
        return f"{self.name}: {kinds} ({extra})"

    def schema(self) -> dict[str, Any]:
        if self.types == ("layout",):
            return LAYOUT_SCHEMA
        if self.choices:
            return {"enum": list(self.choices)}
        alternatives = []
        for kind in self.types:
            if kind == "integer list":
                alternatives.append({"type": "array", "items": {"type": "integer"}})
            elif kind == "list":
                alternatives.append({"type": "array"})
            elif kind == "mesh axis name":
                alternatives.append({"type": "string", "minLength": 1})
            else:
                alternatives.append({"type": kind})
        return alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}


@dataclasses.dataclass(frozen=True)
class Signature:
    """What a case of ``op`` must give: ``arity`` inputs, these ``kwargs``."""

    op: str
    arity: int
    input_dtypes: tuple[str, ...]
    kwargs: Mapping[str, Kwarg]

    def describe_kwargs(self) -> str:
        if not self.kwargs:
            return "none"
        return "; ".join(k.describe() for k in self.kwargs.values())


def _json(value: Any) -> str:
    return json.dumps(value)


def _kind(name: str, value: Any) -> str:
    if name == "target":
        return "layout"
    if name == "axis_name":
        return "mesh axis name"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool)
                                                for v in value):
        return "integer list"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, dict):
        return "object"
    raise TypeError(f"catalogue kwarg {name}={value!r}: a case file cannot give it (not JSON)")


def _reduction_choices() -> tuple[str, ...]:
    seen: list[str] = []
    for op in OPS.values():
        for variant in op.variants:
            value = variant.get("op")
            if isinstance(value, str) and value not in seen:
                seen.append(value)
    return tuple(seen)


def signature(op: Op) -> Signature:
    """The case-file signature of ``op`` (see the module docstring)."""
    names: list[str] = []
    for variant in op.variants:
        names += [n for n in variant if n not in names]
    kwargs = {}
    for name in names:
        values = [v[name] for v in op.variants if name in v]
        kinds = tuple(dict.fromkeys(_kind(name, v) for v in values))
        required = all(name in v for v in op.variants)
        choices = _reduction_choices() if name == "op" else ()
        examples = tuple(json.loads(e) for e in dict.fromkeys(
            _json(v) for v in values if v != "sample"))[:3]
        kwargs[name] = Kwarg(name, kinds, required, choices, examples)
    return Signature(op.name, len(op.args), tuple(a.dtype for a in op.args), kwargs)


SIGNATURES: dict[str, Signature] = {name: signature(op) for name, op in OPS.items()}


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a case file, one branch per op."""
    input_schema = {
        "type": "object",
        "oneOf": [
            {"required": ["scalar"], "properties": {"scalar": {"type": "number"}},
             "additionalProperties": False},
            {"required": ["layout"],
             "properties": {
                 "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                 "dtype": {"enum": list(DTYPES)},
                 "layout": {"anyOf": [{"type": "null"}, LAYOUT_SCHEMA]},
                 "values": {"type": "array"},
                 "domain": {"type": "string"}},
             "additionalProperties": False},
        ],
    }
    per_op = []
    for sig in SIGNATURES.values():
        per_op.append({
            "if": {"properties": {"op": {"const": sig.op}}, "required": ["op"]},
            "then": {"properties": {
                "inputs": {"minItems": sig.arity, "maxItems": sig.arity},
                "kwargs": {"type": "object",
                           "properties": {k.name: k.schema() for k in sig.kwargs.values()},
                           "required": [k.name for k in sig.kwargs.values() if k.required],
                           "additionalProperties": False}}},
        })
    case_schema = {
        "type": "object",
        "required": ["id", "op", "inputs"],
        "properties": {
            "id": {"type": "string", "minLength": 1},
            "op": {"enum": list(SIGNATURES)},
            "mesh": {"type": "object", "required": ["shape"],
                     "properties": {"shape": {"type": "array", "minItems": 1,
                                              "items": {"type": "integer", "minimum": 1}},
                                    "axis_names": {"type": "array",
                                                   "items": {"type": "string", "minLength": 1}},
                                    "axis_types": {"type": "array",
                                                   "items": {"enum": list(AXIS_TYPES)}}},
                     "additionalProperties": False},
            "inputs": {"type": "array", "minItems": 1, "items": input_schema},
            "kwargs": {"type": "object"},
            "grad": {"type": "boolean"},
            "values": {"type": "array"},
            "note": {"type": "string"},
        },
        "additionalProperties": False,
        "allOf": per_op,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "parity case file",
        "description": "Generated from conformance/catalogue/ by "
                       "`python -m conformance.docs.case_format`; see docs/case-format.md.",
        "type": "object",
        "required": ["cases"],
        "properties": {"cases": {"type": "array", "items": case_schema}},
        "additionalProperties": False,
    }
