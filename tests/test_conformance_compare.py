"""Verdicts on hand-made reports: every verdict, its reason, the CLI exit status."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from conformance.records.values import encode
from conformance.reports.compare import VERDICTS, compare_reports, to_markdown, verdict_of

TOL = {"class": "elementwise", "rtol": 1e-6, "atol": 1e-6}
SHARDS = {str(d): [[0, 4] if d < 4 else [4, 8], [0, 6]] for d in range(8)}


def output(values=None, spec=(("data",), ()), shards=None, rule="typed", pending=()):
    values = np.arange(48, dtype=np.float32).reshape(8, 6) if values is None else values
    return {"shape": list(values.shape), "dtype": values.dtype.name,
            "spec": [list(n) for n in spec], "shards": shards or SHARDS,
            "pending": list(pending), "rule": rule, "values": encode(values)}


def entry(cid="c", outputs=None, grads=(), error=None):
    if error:
        return {"id": cid, "op": "add", "status": "error", "error": error, "outputs": [],
                "grads": [], "tolerance": TOL}
    return {"id": cid, "op": "add", "status": "ok", "error": None,
            "outputs": outputs if outputs is not None else [output()],
            "grads": list(grads), "tolerance": TOL, "grad_tolerance": TOL}


def report(*entries, backend="jax"):
    return {"schema": "parity.report/1", "backend": backend, "device": "cpu",
            "mode": "simulated", "versions": {}, "cases": list(entries)}


def err(category, type_="ValueError"):
    return {"category": category, "type": type_, "message": "boom"}


def test_same_outputs_match():
    assert verdict_of(entry(), entry())["verdict"] == "match"


def test_values_beyond_tolerance_differ_and_say_where():
    bad = np.arange(48, dtype=np.float32).reshape(8, 6)
    bad[3, 2] += 0.5
    v = verdict_of(entry(), entry(outputs=[output(bad)]))
    assert v["verdict"] == "values-differ"
    assert "index (3, 2)" in v["reason"] and "1 of 48" in v["reason"]


def test_values_recorded_with_another_shape_differ_instead_of_crashing():
    # raw DTensor's unflatten recorded shape (8, 6) with values of another shape
    odd = output()
    odd["values"] = encode(np.zeros((8, 1, 4), np.float32))
    v = verdict_of(entry(), entry(outputs=[odd]))
    assert v["verdict"] == "values-differ"
    assert "values of shape (8, 1, 4) != reference (8, 6)" in v["reason"]


def test_values_within_tolerance_match():
    near = np.arange(48, dtype=np.float32).reshape(8, 6) * (1 + 1e-7)
    assert verdict_of(entry(), entry(outputs=[output(near)]))["verdict"] == "match"


def test_integer_width_difference_is_a_note_not_a_failure():
    ref = entry(outputs=[output(np.arange(8, dtype=np.int32))])
    cand = entry(outputs=[output(np.arange(8, dtype=np.int64))])
    v = verdict_of(ref, cand)
    assert v["verdict"] == "match" and "x64" in v["notes"][0]


def test_typed_placement_that_differs_is_placement_differs():
    moved = {**SHARDS, "1": [[4, 8], [0, 6]]}
    v = verdict_of(entry(), entry(outputs=[output(shards=moved, rule=None)]))
    assert v["verdict"] == "placement-differs" and "device 1" in v["reason"]


def test_pending_reduction_is_a_placement_difference():
    v = verdict_of(entry(), entry(outputs=[output(pending=("model",), rule=None)]))
    assert v["verdict"] == "placement-differs" and "pending" in v["reason"]


def test_chosen_placement_that_differs_is_a_match_with_a_note():
    ref = entry(outputs=[output(rule="chosen")])
    cand = entry(outputs=[output(spec=((), ()), shards={str(d): [[0, 8], [0, 6]] for d in range(8)})])
    v = verdict_of(ref, cand)
    assert v["verdict"] == "match" and v["notes"][0].startswith("chosen placement")


def test_gradients_that_differ_are_grads_differ():
    g = output()
    g_bad = output(np.zeros((8, 6), np.float32))
    v = verdict_of(entry(grads=[{**g, "input": 0}]), entry(grads=[{**g_bad, "input": 0}]))
    assert v["verdict"] == "grads-differ" and "gradient of input 0" in v["reason"]


@pytest.mark.parametrize("ref_err,cand_err,verdict", [
    (err("indivisible"), err("indivisible", "ShardingError"), "both-reject"),
    (err("indivisible"), err("unsupported"), "error-differs"),
    (err("indivisible"), None, "error-differs"),
    (None, err("other"), "error-differs"),
    (err("other"), err("other"), "both-other"),
])
def test_errors(ref_err, cand_err, verdict):
    assert verdict_of(entry(error=ref_err), entry(error=cand_err))["verdict"] == verdict


def test_both_failing_with_category_other_does_not_hold():
    comp = compare_reports(report(entry("a", error=err("other"))),
                           report(entry("a", error=err("other")), backend="torch"))
    assert comp["summary"]["both-other"] == 1 and not comp["ok"]
    assert "both fail with category other" in comp["cases"][0]["reason"]


def test_markdown_lists_both_reject_cases_too():
    comp = compare_reports(report(entry("a", error=err("indivisible"))),
                           report(entry("a", error=err("indivisible")), backend="torch"))
    md = to_markdown(comp)
    assert "both backends reject" in md and "| `a` | both-reject |" in md


def test_missing_cases_and_summary_counts_every_verdict():
    ref = report(entry("a"), entry("b"), entry("c", error=err("indivisible")), entry("d"))
    cand = report(entry("a"), entry("b", outputs=[output(np.zeros((8, 6), np.float32))]),
                  entry("c", error=err("indivisible")), entry("e"), backend="torch")
    comp = compare_reports(ref, cand)
    assert comp["schema"] == "parity.comparison/1"
    assert set(comp["summary"]) == set(VERDICTS)
    assert comp["summary"]["match"] == 1 and comp["summary"]["values-differ"] == 1
    assert comp["summary"]["both-reject"] == 1 and comp["summary"]["missing"] == 2
    assert not comp["ok"]
    md = to_markdown(comp)
    assert "| missing | 2 |" in md and "`b`" in md


def test_parity_compare_exit_status_and_outputs(tmp_path, capsys):
    from parity.cli import main

    ref, good, bad = tmp_path / "r.json", tmp_path / "g.json", tmp_path / "b.json"
    ref.write_text(json.dumps(report(entry("a"))))
    good.write_text(json.dumps(report(entry("a"), backend="torch")))
    worse = copy.deepcopy(report(entry("a", error=err("other")), backend="torch"))
    bad.write_text(json.dumps(worse))
    assert main(["compare", str(ref), str(good), "--json", str(tmp_path / "c.json"),
                 "--md", str(tmp_path / "c.md")]) == 0
    assert json.loads((tmp_path / "c.json").read_text())["summary"]["match"] == 1
    assert main(["compare", str(ref), str(bad)]) == 1
    assert main(["compare", str(ref), str(tmp_path / "none.json")]) == 2
    assert "no such report" in capsys.readouterr().err


def test_zero_dim_outputs_compare():
    ref = entry(outputs=[output(np.array(1.0, np.float32), spec=(), shards={"0": []})])
    cand = entry(outputs=[output(np.array(2.0, np.float32), spec=(), shards={"0": []})])
    v = verdict_of(ref, cand)
    assert v["verdict"] == "values-differ" and "!= reference 1" in v["reason"]


def test_undescribable_dtensor_placement_is_a_placement_difference():
    odd = {**output(), "spec": None, "shards": None, "placements": "(_StridedShard(dim=1, sf=8),)"}
    v = verdict_of(entry(), entry(outputs=[odd]))
    assert v["verdict"] == "placement-differs" and "_StridedShard" in v["reason"]
