"""The catalogue package (``conformance.catalogue``): its JAX twins of OpInfo ops,
its family modules, every op in one place."""

from __future__ import annotations

from pathlib import Path

import pytest

import conformance.catalogue as catalogue
from conformance.catalogue import OPS, TWIN_BUDGET
from conformance.cases import default_cases


def test_catalogue_compares_at_least_200_ops_against_jax():
    compared = [name for name, op in OPS.items() if op.group != "api"]
    assert len(compared) >= 200


def test_family_modules_stay_under_400_lines():
    for path in Path(catalogue.__file__).parent.glob("*.py"):
        assert len(path.read_text().splitlines()) < 400, path.name


def test_new_ops_run_a_small_default_budget():
    """Each twin gets at most TWIN_BUDGET layouts per mesh and variant, so the
    default suite stays within its time budget (about 2,700 cases)."""
    new = {op.name for op in OPS.values() if op.budget == TWIN_BUDGET}
    assert len(new) >= 180
    # Layouts drawn on divisible shapes (broadcast and indivisible shape sets
    # take a fixed 2 per mesh, mixed cases one per operand form).
    cases = [c for c in default_cases() if c.op in new and "/div/" in c.id]
    per_op = {}
    for c in cases:
        per_op[c.op] = per_op.get(c.op, 0) + 1
    for name in per_op:
        divisible = sum(1 for s in OPS[name].shape_sets if s.divisible and s.tag == "div")
        assert per_op[name] <= sum(TWIN_BUDGET) * len(OPS[name].variants) * divisible, name


def test_every_op_lives_in_exactly_one_family_module_of_its_group():
    owners = {}
    for family in catalogue.FAMILIES:
        for op in family.OPS:
            owners.setdefault(op.name, []).append(family.__name__)
            assert op.group in catalogue.GROUPS
    assert {n: m for n, m in owners.items() if len(m) > 1} == {}
    assert list(owners) == list(OPS)  # OPS is the families' ops, nothing else


def test_a_repeated_op_name_is_refused_naming_both_modules(monkeypatch):
    monkeypatch.setattr(catalogue.api, "OPS", catalogue.api.OPS + catalogue.api.OPS[:1])
    with pytest.raises(catalogue.DuplicateOpError) as info:
        catalogue._collect()
    assert info.value.name == catalogue.api.OPS[0].name
    assert info.value.modules == ("conformance.catalogue.api", "conformance.catalogue.api")
