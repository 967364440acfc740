"""The catalogue's JAX twins of OpInfo ops (``conformance.catalogue_ops``)."""

from __future__ import annotations

from pathlib import Path

import conformance.catalogue_ops as family
from conformance.catalogue import OPS
from conformance.cases import default_cases


def test_catalogue_compares_at_least_200_ops_against_jax():
    compared = [name for name, op in OPS.items() if op.group != "api"]
    assert len(compared) >= 200


def test_family_modules_stay_under_400_lines():
    for path in Path(family.__file__).parent.glob("*.py"):
        assert len(path.read_text().splitlines()) < 400, path.name


def test_new_ops_run_a_small_default_budget():
    """Each twin gets at most NEW_BUDGET layouts per mesh and variant, so the
    default suite stays within its time budget (about 2,700 cases)."""
    new = {op.name for op in family.all_ops()}
    # Layouts drawn on divisible shapes (broadcast and indivisible shape sets
    # take a fixed 2 per mesh, mixed cases one per operand form).
    cases = [c for c in default_cases() if c.op in new and "/div/" in c.id]
    per_op = {}
    for c in cases:
        per_op[c.op] = per_op.get(c.op, 0) + 1
    for name in per_op:
        divisible = sum(1 for s in OPS[name].shape_sets if s.divisible and s.tag == "div")
        assert per_op[name] <= sum(family.NEW_BUDGET) * len(OPS[name].variants) * divisible, name
