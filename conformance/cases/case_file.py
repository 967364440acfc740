"""Case files: read, checked against the JSON Schema and each op's
signature, parsed into ``Case``s.

A case file is JSON (SPEC, "Case files"):

```json
{"cases": [{"id": "matmul/contract-model", "op": "matmul",
            "mesh": {"shape": [2, 4], "axis_names": ["data", "model"]},
            "inputs": [{"shape": [8, 12], "dtype": "float32", "layout": ["data", "model"]},
                       {"shape": [12, 6], "dtype": "float32", "layout": ["model", null]}],
            "kwargs": {}, "grad": false}]}
```

Inputs beyond SPEC's distributed array (documented in docs/reports.md):
``"layout": null`` is a plain host array (a mixed operand), ``{"scalar": 2.0}``
a Python scalar, and ``"values"`` (nested lists) fixes an input's values.
A kwarg that is a target layout (``distribute_tensor``'s ``target``) is a list
like ``inputs[].layout``.

Every error in a case file raises ``CaseFileError`` whose message starts with
the path of the offending field, e.g. ``cases[2].inputs[0].layout[1]: ...``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema

from conformance.cases.case import Case, Input, Spec, layout_json
from conformance.cases.shape_check import UnfitCase, check_fit, jax_available, warn_unchecked
from conformance.cases.signatures import AXIS_TYPES, SIGNATURES, Kwarg, json_schema
from conformance.catalogue import OPS, Arg, unknown_op
from conformance.records.values import DTYPES

# The axis names a case's mesh gets when the case file names none.
DEFAULT_AXIS_NAMES = {1: ("x",), 2: ("data", "model"), 3: ("a", "b", "c")}


class CaseFileError(ValueError):
    """A case file that cannot run; the message names the field."""


def _err(path: str, message: str) -> CaseFileError:
    return CaseFileError(f"{path}: {message}")


def parse_layout(raw: Any, path: str, axis_names: Sequence[str], rank: int) -> Spec:
    if not isinstance(raw, list):
        raise _err(path, f"a layout is a list with one entry per dim (null, a name or a list "
                         f"of names); got {raw!r}")
    if len(raw) != rank:
        raise _err(path, f"the layout has {len(raw)} entries but the input has rank {rank}")
    spec = []
    used: dict[str, int] = {}
    for d, entry in enumerate(raw):
        names = [] if entry is None else [entry] if isinstance(entry, str) else entry
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _err(f"{path}[{d}]", f"expected null, a mesh axis name or a list of names; "
                                       f"got {entry!r}")
        for n in names:
            if n not in axis_names:
                raise _err(f"{path}[{d}]", f"{n!r} is not a mesh axis; the mesh axes are "
                                           f"{list(axis_names)}")
            if n in used:
                raise _err(f"{path}[{d}]", f"mesh axis {n!r} is already used on dim {used[n]}")
            used[n] = d
        spec.append(tuple(names))
    return tuple(spec)


def _shape_of(values: Any) -> tuple[int, ...]:
    shape = []
    while isinstance(values, list):
        shape.append(len(values))
        values = values[0] if values else None
    return tuple(shape)


def _parse_mesh(mesh: Any, path: str, default_mesh: tuple | None
                ) -> tuple[tuple[int, ...], tuple[str, ...], tuple[str, ...] | None]:
    """A case's ``mesh`` field (or ``default_mesh`` where it has none):
    ``(shape, axis_names, axis_types)``. Raises ``CaseFileError`` naming the field."""
    axis_types = None
    if mesh is None and default_mesh is not None:
        mesh_shape, axis_names = default_mesh
    else:
        if not isinstance(mesh, dict):
            raise _err(f"{path}.mesh", 'required: {"shape": [2, 4], "axis_names": ["data", "model"]}')
        mesh_shape, axis_names = mesh.get("shape"), mesh.get("axis_names")
        if (not isinstance(mesh_shape, list) or not mesh_shape
                or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in mesh_shape)):
            raise _err(f"{path}.mesh.shape", f"a non-empty list of positive ints; got {mesh_shape!r}")
        if axis_names is None:
            axis_names = list(DEFAULT_AXIS_NAMES.get(len(mesh_shape),
                                                     [f"axis{i}" for i in range(len(mesh_shape))]))
        if (not isinstance(axis_names, list) or len(axis_names) != len(mesh_shape)
                or not all(isinstance(n, str) and n for n in axis_names)
                or len(set(axis_names)) != len(axis_names)):
            raise _err(f"{path}.mesh.axis_names",
                       f"one distinct non-empty name per mesh dim ({len(mesh_shape)}); got {axis_names!r}")
        axis_types = mesh.get("axis_types")
        if axis_types is not None and (
                not isinstance(axis_types, list) or len(axis_types) != len(mesh_shape)
                or not all(t in AXIS_TYPES for t in axis_types)):
            raise _err(f"{path}.mesh.axis_types",
                       f"one of {list(AXIS_TYPES)} per mesh dim ({len(mesh_shape)}); "
                       f"got {axis_types!r}")
        axis_types = None if axis_types is None else tuple(axis_types)
    return tuple(mesh_shape), tuple(axis_names), axis_types


def _parse_input(item: Any, ipath: str, arg: Arg | None, case_value: Any,
                 axis_names: Sequence[str]) -> Input:
    """One entry of a case's ``inputs`` (``arg``: the op's catalogue argument
    at that position, for the default dtype and domain; ``case_value``: the
    case's ``values`` entry for it). Raises ``CaseFileError`` naming the field."""
    if not isinstance(item, dict):
        raise _err(ipath, "an input is an object with shape, dtype and layout (or scalar)")
    if "scalar" in item:
        value = item["scalar"]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _err(f"{ipath}.scalar", f"a number; got {value!r}")
        return Input("scalar", values=value)
    for key in item:
        if key not in ("shape", "dtype", "layout", "values", "domain"):
            raise _err(f"{ipath}.{key}", "unknown field; an input has shape, dtype, layout, "
                                         "values (or scalar)")
    values = item.get("values", case_value)
    shape = item.get("shape")
    if shape is None and values is not None:
        shape = list(_shape_of(values))
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool)
                                              and s >= 0 for s in shape):
        raise _err(f"{ipath}.shape", f"required: a list of non-negative ints; got {shape!r}")
    if values is not None and _shape_of(values) != tuple(shape):
        raise _err(f"{ipath}.values", f"nested lists of shape {_shape_of(values)} do not "
                                      f"match shape {shape}")
    dtype = item.get("dtype", arg.dtype if arg else "float32")
    if dtype not in DTYPES:
        raise _err(f"{ipath}.dtype", f"{dtype!r} is not one of {list(DTYPES)} (JAX runs "
                                     "with x64 disabled)")
    domain = item.get("domain", arg.domain if arg and arg.dtype == dtype else
                      ("bool" if dtype == "bool" else "normal"))
    if "layout" not in item:
        raise _err(f"{ipath}.layout", "required: a list (one entry per dim), or null for a "
                                      "plain host array")
    layout = item["layout"]
    spec = None if layout is None else parse_layout(layout, f"{ipath}.layout", axis_names, len(shape))
    return Input("array" if spec is not None else "host", tuple(shape), dtype, spec,
                 domain, values)


def parse_case(raw: Any, path: str = "case", default_mesh: tuple | None = None) -> Case:
    """One case from its JSON form. Raises ``CaseFileError`` naming the field."""
    if not isinstance(raw, dict):
        raise _err(path, f"a case is an object; got {type(raw).__name__}")
    known = {"id", "op", "mesh", "inputs", "kwargs", "grad", "values", "note"}
    for key in raw:
        if key not in known:
            raise _err(f"{path}.{key}", f"unknown field; a case has {sorted(known)}")
    cid = raw.get("id")
    if not isinstance(cid, str) or not cid:
        raise _err(f"{path}.id", "required: a non-empty string")
    op = raw.get("op")
    if not isinstance(op, str) or op not in OPS:
        raise _err(f"{path}.op", unknown_op(op))
    mesh_shape, axis_names, axis_types = _parse_mesh(raw.get("mesh"), path, default_mesh)
    inputs_raw = raw.get("inputs")
    if not isinstance(inputs_raw, list) or not inputs_raw:
        raise _err(f"{path}.inputs", "required: a non-empty list of inputs")
    case_values = raw.get("values")
    if case_values is not None and (not isinstance(case_values, list) or len(case_values) != len(inputs_raw)):
        raise _err(f"{path}.values", "a list with one entry (nested lists or null) per input")
    spec_op = OPS[op]
    arity = SIGNATURES[op].arity
    if len(inputs_raw) != arity:
        raise _err(f"{path}.inputs", f"{op} takes {arity} input{'s' if arity > 1 else ''}; "
                                     f"got {len(inputs_raw)}")
    inputs = []
    for i, item in enumerate(inputs_raw):
        arg = spec_op.args[i] if i < len(spec_op.args) else None
        inputs.append(_parse_input(item, f"{path}.inputs[{i}]", arg,
                                   case_values[i] if case_values else None, axis_names))
    kwargs = raw.get("kwargs", {})
    if not isinstance(kwargs, dict):
        raise _err(f"{path}.kwargs", f"an object; got {kwargs!r}")
    check_signature(op, len(inputs_raw), kwargs, path)
    if "target" in kwargs:
        target = kwargs["target"]
        rank = len(inputs[0].shape)
        kwargs = {**kwargs, "target": layout_json(parse_layout(
            target, f"{path}.kwargs.target", axis_names, rank))}
    # An axis_name the mesh lacks is kept as given: the backends must reject
    # it (invalid-layout), and the report records it.
    grad = raw.get("grad", False)
    if not isinstance(grad, bool):
        raise _err(f"{path}.grad", f"true or false; got {grad!r}")
    return Case(cid, op, mesh_shape, axis_names, tuple(inputs), kwargs, grad, axis_types)


def check_signature(op: str, n_inputs: int, kwargs: Mapping[str, Any], path: str) -> None:
    """Raise ``CaseFileError`` unless ``kwargs`` fit the op's signature
    (``conformance.cases.signatures``): known names, JSON types, choices, every
    required name given. The message names the field and the valid kwargs."""
    sig = SIGNATURES[op]
    for name, value in kwargs.items():
        kw = sig.kwargs.get(name)
        if kw is None:
            raise _err(f"{path}.kwargs.{name}", f"{op} has no kwarg {name!r}; {op} takes: "
                                                f"{sig.describe_kwargs()}")
        if not _fits(kw, value):
            raise _err(f"{path}.kwargs.{name}", f"{value!r} does not fit; {kw.describe()}")
    missing = [k.name for k in sig.kwargs.values() if k.required and k.name not in kwargs]
    if missing:
        raise _err(f"{path}.kwargs", f"missing {', '.join(map(repr, missing))}; {op} takes: "
                                     f"{sig.describe_kwargs()}")


def _fits(kw: Kwarg, value: Any) -> bool:
    if kw.choices:
        return value in kw.choices
    for kind in kw.types:
        if kind == "layout":
            return isinstance(value, list)  # parse_layout checks the entries
        if kind in ("string", "mesh axis name") and isinstance(value, str) and value:
            return True
        if kind == "null" and value is None:
            return True
        if kind == "boolean" and isinstance(value, bool):
            return True
        if kind == "integer" and isinstance(value, int) and not isinstance(value, bool):
            return True
        if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if kind == "list" and isinstance(value, list):
            return True
        if kind == "object" and isinstance(value, dict):
            return True
        if kind == "integer list" and isinstance(value, list) and all(
                isinstance(v, int) and not isinstance(v, bool) for v in value):
            return True
    return False


def validate_schema(data: Any) -> None:
    """Raise ``CaseFileError`` (field path and reason) when ``data`` does not
    follow the case-file JSON Schema (``signatures.json_schema``). A case's
    kwargs are checked first by ``check_signature``, whose message lists the
    op's valid kwargs."""
    for i, case in enumerate(data.get("cases", []) if isinstance(data, dict) else []):
        if (isinstance(case, dict) and case.get("op") in SIGNATURES
                and isinstance(case.get("kwargs", {}), dict)):
            check_signature(case["op"], len(case.get("inputs") or ()), case.get("kwargs", {}),
                            f"cases[{i}]")
    validator = jsonschema.Draft202012Validator(_schema())
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is None:
        return
    parts = list(error.absolute_path)
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).lstrip(".")
    message = error.message
    if parts[:1] == ["cases"] and parts[2:] == ["op"] and error.validator == "enum":
        message = unknown_op(error.instance)  # the closest names, not the 235 inline
    if parts[:1] == ["cases"] and len(parts) >= 3 and parts[2] == "inputs":
        op = data["cases"][parts[1]].get("op")
        if op in SIGNATURES and len(parts) == 3:
            message = (f"{op} takes {SIGNATURES[op].arity} input(s); got "
                       f"{len(data['cases'][parts[1]]['inputs'])}")
    raise CaseFileError(f"{where or '(file)'}: {message} (see docs/case-format.md)")


@functools.cache
def _schema() -> dict[str, Any]:
    return json_schema()


def load_case_file(path: str | Path, default_mesh: tuple | None = None,
                   check_shapes: bool = True) -> list[Case]:
    """All cases of a case file, validated against the JSON Schema, parsed,
    and (``check_shapes``, when JAX is installed) their shapes checked
    against the op (``shape_check``). Raises ``CaseFileError`` naming the
    file and the field.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CaseFileError(f"{path}: no such case file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise CaseFileError(f"{path}: cannot read it: {err}") from None
    except json.JSONDecodeError as err:
        raise CaseFileError(f"{path}: not valid JSON: {err}") from None
    try:
        validate_schema(data)
        cases = parse_cases(data, default_mesh)
    except CaseFileError as err:
        raise CaseFileError(f"{path}: {err}") from None
    if check_shapes and not jax_available():
        warn_unchecked()
    elif check_shapes:
        for i, case in enumerate(cases):
            try:
                check_fit(case.to_json())
            except UnfitCase as err:
                raise CaseFileError(f"{path}: cases[{i}].inputs: {err}") from None
    return cases


def parse_cases(data: Any, default_mesh: tuple | None = None) -> list[Case]:
    """Cases from a parsed case file; ids must be unique."""
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise CaseFileError('cases: the file is an object {"cases": [...]}')
    cases, seen = [], {}
    for i, raw in enumerate(data["cases"]):
        case = parse_case(raw, f"cases[{i}]", default_mesh)
        if case.id in seen:
            raise CaseFileError(f"cases[{i}].id: {case.id!r} repeats cases[{seen[case.id]}].id")
        seen[case.id] = i
        cases.append(case)
    return cases


