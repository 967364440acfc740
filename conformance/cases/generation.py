"""The default catalogue's cases: for every op of ``conformance.catalogue``,
its shape sets and kwargs variants on the meshes (8,), (2,4) and (2,2,2),
with a deterministic, stratified sample of its inputs' layouts (every class
of "which dims are sharded" before any repeats). Case ids are stable: the
same catalogue always gives the same cases."""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

from conformance.cases.case import Case, Input, Spec, layout_json, spec_text
from conformance.cases.case_file import parse_layout
from conformance.catalogue import OPS, Op
from parity.layout_space import all_specs as _all_specs

MESHES: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = {
    "8": ((8,), ("x",)),
    "2x4": ((2, 4), ("data", "model")),
    "2x2x2": ((2, 2, 2), ("a", "b", "c")),
}


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
