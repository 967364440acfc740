"""Cases: the ``Case`` type, case files, and the default catalogue's cases.

This package's own module; beside it ``signatures`` (each op's case-file
signature and the JSON Schema, from the catalogue) and ``shape_check`` (do
a case's shapes fit its op: JAX ``eval_shape``).

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

import dataclasses
import functools
import hashlib
import itertools
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema

from conformance.cases.shape_check import UnfitCase, check_fit, jax_available, warn_unchecked
from conformance.cases.signatures import AXIS_TYPES, SIGNATURES, Kwarg, json_schema
from conformance.catalogue import OPS, Op, unknown_op
from conformance.records.values import DTYPES
from parity.layout_space import all_specs as _all_specs

MESHES: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = {
    "8": ((8,), ("x",)),
    "2x4": ((2, 4), ("data", "model")),
    "2x2x2": ((2, 2, 2), ("a", "b", "c")),
}
DEFAULT_AXIS_NAMES = {1: ("x",), 2: ("data", "model"), 3: ("a", "b", "c")}

Spec = tuple[tuple[str, ...], ...]


class CaseFileError(ValueError):
    """A case file that cannot run; the message names the field."""


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


# ---------------------------------------------------------------- parsing

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
    mesh = raw.get("mesh")
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
    mesh_shape, axis_names = tuple(mesh_shape), tuple(axis_names)
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
        ipath = f"{path}.inputs[{i}]"
        if not isinstance(item, dict):
            raise _err(ipath, "an input is an object with shape, dtype and layout (or scalar)")
        if "scalar" in item:
            value = item["scalar"]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise _err(f"{ipath}.scalar", f"a number; got {value!r}")
            inputs.append(Input("scalar", values=value))
            continue
        for key in item:
            if key not in ("shape", "dtype", "layout", "values", "domain"):
                raise _err(f"{ipath}.{key}", "unknown field; an input has shape, dtype, layout, "
                                             "values (or scalar)")
        values = item.get("values", case_values[i] if case_values else None)
        shape = item.get("shape")
        if shape is None and values is not None:
            shape = list(_shape_of(values))
        if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool)
                                                  and s >= 0 for s in shape):
            raise _err(f"{ipath}.shape", f"required: a list of non-negative ints; got {shape!r}")
        if values is not None and _shape_of(values) != tuple(shape):
            raise _err(f"{ipath}.values", f"nested lists of shape {_shape_of(values)} do not "
                                          f"match shape {shape}")
        arg = spec_op.args[i] if i < len(spec_op.args) else None
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
        inputs.append(Input("array" if spec is not None else "host", tuple(shape), dtype,
                            spec, domain, values))
    kwargs = raw.get("kwargs", {})
    if not isinstance(kwargs, dict):
        raise _err(f"{path}.kwargs", f"an object; got {kwargs!r}")
    check_signature(op, len(inputs_raw), kwargs, path)
    if "target" in kwargs:
        target = kwargs["target"]
        rank = len(inputs[0].shape)
        kwargs = {**kwargs, "target": layout_json(parse_layout(
            target, f"{path}.kwargs.target", axis_names, rank))}
    if "axis_name" in kwargs and kwargs["axis_name"] not in axis_names:
        # Kept: the backends must reject it (invalid-layout); recorded as given.
        pass
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


# ------------------------------------------------------------- generation

def all_specs(axis_names: Sequence[str], rank: int) -> list[Spec]:
    return list(_all_specs(axis_names, rank))


def _rng(*parts: object) -> random.Random:
    return random.Random(hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest())


def stratified_sample(combos: list[tuple[Spec, ...]], budget: int, rng: random.Random) -> list[tuple[Spec, ...]]:
    """Up to ``budget`` combos, round-robin over classes of *which dims are
    sharded* (so every class appears before any repeats); all when they fit.
    Deterministic for a given ``rng`` seed."""
    if len(combos) <= budget:
        return list(combos)
    classes: dict[tuple, list] = {}
    for combo in combos:
        key = tuple(bool(n) for spec in combo for n in spec)
        classes.setdefault(key, []).append(combo)
    groups = [classes[k] for k in sorted(classes)]
    for g in groups:
        rng.shuffle(g)
    out: list = []
    for layer in itertools.zip_longest(*groups):
        members = [c for c in layer if c is not None]
        rng.shuffle(members)
        out.extend(members)
        if len(out) >= budget:
            break
    return out[:budget]


def _variant_text(kwargs: Mapping[str, Any]) -> str:
    return ";".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in kwargs.items())


def _make_id(op: str, mesh: str, tag: str, specs: Sequence[Spec | None], kwargs: Mapping, extra: str = "") -> str:
    parts = [op, mesh, tag, "|".join(spec_text(s) for s in specs)]
    if kwargs:
        parts.append(_variant_text(kwargs))
    if extra:
        parts.append(extra)
    return "/".join(parts)


def _grad_for(op: Op, index: int, variant: int = 0) -> bool:
    # A gradient costs ~3x a forward case: one per family (mesh, shape set)
    # of the first kwargs variant carries "grad": true, the second layout
    # combination (the first one that shards something).
    return op.grad and index == 1 and variant == 0


def generate_op_cases(op: Op) -> list[Case]:
    """The default cases of one op (deterministic)."""
    if op.group == "api":
        return _api_cases(op)
    if op.group == "explicit":
        return _explicit_cases(op)
    cases: list[Case] = []
    for mi, (mesh_tag, (mesh_shape, names)) in enumerate(MESHES.items()):
        for shape_set in op.shape_sets:
            for vi, kwargs in enumerate(op.variants):
                if not shape_set.divisible and vi > 0:
                    continue  # indivisible shapes: the first variant says enough
                per_input = [all_specs(names, len(s)) for s in shape_set.shapes]
                budget = op.budget[mi] if shape_set.divisible else 2
                if shape_set.tag == "bcast":
                    budget = 2
                rng = _rng(op.name, mesh_tag, shape_set.tag, vi)
                chosen = stratified_sample(_layout_combos(per_input, rng), budget, rng)
                for k, combo in enumerate(chosen):
                    inputs = tuple(Input("array", shape, arg.dtype, spec, arg.domain)
                                   for shape, spec, arg in zip(shape_set.shapes, combo, op.args))
                    cid = _make_id(op.name, mesh_tag, shape_set.tag, combo, kwargs)
                    cases.append(Case(cid, op.name, mesh_shape, names, inputs, dict(kwargs),
                                      _grad_for(op, k, vi)))
            if op.mixed and shape_set.tag == "div":
                cases.extend(_mixed_cases(op, mesh_tag, mesh_shape, names, shape_set))
    return cases


def _mixed_cases(op: Op, mesh_tag: str, mesh_shape, names, shape_set) -> list[Case]:
    """One sharded operand with a host array, or with a Python scalar, last."""
    out = []
    first = [all_specs(names, len(s)) for s in shape_set.shapes[:-1]]
    combos = stratified_sample(list(itertools.product(*first)), 2, _rng(op.name, mesh_tag, "mixed"))
    # One sharded combo, so the mixed operand meets a real DTensor.
    combos = [c for c in combos if any(n for s in c for n in s)][:1]
    last_arg = op.args[-1]
    scalar = {"small": 2.0, "nonzero": 2.0, "positive": 1.5}.get(last_arg.domain, 1.5)
    for k, combo in enumerate(combos):
        head = tuple(Input("array", shape, arg.dtype, spec, arg.domain)
                     for shape, spec, arg in zip(shape_set.shapes, combo, op.args))
        host = Input("host", shape_set.shapes[-1], last_arg.dtype, None, last_arg.domain)
        out.append(Case(_make_id(op.name, mesh_tag, "mixed-host", combo + (None,), {}),
                        op.name, mesh_shape, names, head + (host,), {}, op.grad))
        if op.group != "linalg":  # a contraction has no scalar operand (matmul(x, 2.0) fails)
            out.append(Case(_make_id(op.name, mesh_tag, "mixed-scalar", combo, {}, "scalar"),
                            op.name, mesh_shape, names, head + (Input("scalar", values=scalar),),
                            {}))
    return out


def _api_cases(op: Op) -> list[Case]:
    cases = []
    for mi, (mesh_tag, (mesh_shape, names)) in enumerate(MESHES.items()):
        for shape_set in op.shape_sets:
            shape = shape_set.shapes[0]
            specs = all_specs(names, len(shape))
            for vi, variant in enumerate(op.variants):
                budget = op.budget[mi] if shape_set.divisible else 2
                rng = _rng(op.name, mesh_tag, shape_set.tag, vi)
                if op.name in ("distribute_tensor", "distribute_data_input"):
                    combos = list(itertools.product(specs, specs))
                    n = budget if op.name == "distribute_tensor" else len(specs)
                    chosen = stratified_sample(combos, n, rng)
                    if op.name == "distribute_data_input":
                        chosen = [(None, t) for t in specs][: max(3, min(len(specs), 6))]
                    for src, target in chosen:
                        kw = {"target": layout_json(target)}
                        inp = Input("host" if src is None else "array", shape, "float32", src)
                        cid = _make_id(op.name, mesh_tag, shape_set.tag, (src,), {}, "to:" + spec_text(target))
                        cases.append(Case(cid, op.name, mesh_shape, names, (inp,), kw))
                elif "axis_name" in variant:
                    for axis_name in names:
                        chosen = stratified_sample([(s,) for s in specs], budget,
                                                   _rng(op.name, mesh_tag, vi, axis_name))
                        for (spec,) in chosen:
                            kw = {**variant, "axis_name": axis_name}
                            cid = _make_id(op.name, mesh_tag, shape_set.tag, (spec,), kw)
                            cases.append(Case(cid, op.name, mesh_shape, names,
                                              (Input("array", shape, "float32", spec),), kw))
                else:
                    for (spec,) in stratified_sample([(s,) for s in specs], budget, rng):
                        cid = _make_id(op.name, mesh_tag, shape_set.tag, (spec,), variant)
                        cases.append(Case(cid, op.name, mesh_shape, names,
                                          (Input("array", shape, "float32", spec),), dict(variant)))
    return cases


def _explicit_cases(op: Op) -> list[Case]:
    """An ``explicit`` op's fixed layout combinations on the ``2x4`` mesh
    with both axes Explicit, per kwargs variant; the first combination of
    the first variant of a differentiable op carries ``grad``."""
    mesh_shape, names = MESHES["2x4"]
    (shape_set,) = op.shape_sets
    cases = []
    for vi, kwargs in enumerate(op.variants):
        for k, layouts in enumerate(op.fixed):
            specs = tuple(parse_layout(list(lay), "fixed", names, len(shape))
                          for lay, shape in zip(layouts, shape_set.shapes))
            inputs = tuple(Input("array", shape, arg.dtype, spec, arg.domain)
                           for shape, spec, arg in zip(shape_set.shapes, specs, op.args))
            cid = _make_id(op.name, "2x4", "explicit", specs, kwargs)
            cases.append(Case(cid, op.name, mesh_shape, names, inputs, dict(kwargs),
                              op.grad and vi == 0 and k == 0, ("explicit",) * len(names)))
    return cases


MAX_COMBOS = 200_000


def _layout_combos(per_input: list[list[Spec]], rng: random.Random) -> list[tuple[Spec, ...]]:
    """Every combination of the inputs' layouts; past ``MAX_COMBOS`` (ops with
    many high-rank inputs: tens of millions), a deterministic draw of 20,000
    distinct ones instead, so sampling stays fast."""
    total = 1
    for specs in per_input:
        total *= len(specs)
    if total <= MAX_COMBOS:
        return list(itertools.product(*per_input))
    drawn: dict[tuple[Spec, ...], None] = {}
    while len(drawn) < 20_000:
        drawn[tuple(rng.choice(specs) for specs in per_input)] = None
    return list(drawn)


def default_cases(ops: Sequence[str] = ()) -> list[Case]:
    """The default catalogue: every op (or only ``ops``) on meshes (8,),
    (2,4), (2,2,2)."""
    cases = [c for op in OPS.values() if not ops or op.name in ops
             for c in generate_op_cases(op)]
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "duplicate case ids in the default catalogue"
    return cases


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
