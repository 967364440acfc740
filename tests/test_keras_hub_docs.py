"""docs/keras-hub.md's per-family table is the rendering of
docs/keras-hub-results.json (``scripts/keras_hub_table.py``): no number in
it is typed by hand. Pure Python, no framework."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_table_script():
    spec = importlib.util.spec_from_file_location("keras_hub_table",
                                                  ROOT / "scripts" / "keras_hub_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_table_is_rendered_from_the_results_file():
    table = load_table_script()
    results = json.loads(table.RESULTS.read_text())
    doc = table.DOC.read_text()
    inside = doc.split(table.BEGIN, 1)[1].split(table.END, 1)[0].strip()
    assert inside == table.render(results)
    # Every family of the matrix has a row.
    assert inside.count("\n| ") + 1 >= len(results["derived"]) + 1
    assert len(results["derived"]) >= 20


def test_every_run_records_its_provenance():
    """A run recorded since ``PROVENANCE_SINCE`` carries its date, commit,
    tree state, machine and command; an older one what git knows (the
    commit that recorded it and its date), never a made-up machine."""
    table = load_table_script()
    runs = json.loads(table.RESULTS.read_text())["runs"]
    assert table.provenance_problems(runs) == []
    for entry in runs.values():
        p = entry["provenance"]
        assert ("recorded_in" in p) == (p["date"] < table.PROVENANCE_SINCE)
        assert "machine" not in p or "recorded_in" not in p
    broken = {"x:2x4": {"provenance": {"date": table.PROVENANCE_SINCE, "commit": "abc1234"}},
              "y:2x4": {"error": None},
              "z:2x4": {"provenance": {"date": "2026-11-20", "recorded_in": "not-a-commit",
                                       "note": "n"}}}
    assert [p.split(":")[0] for p in table.provenance_problems(broken)] == ["x", "y", "z"]


def test_record_runs_writes_the_provenance_of_the_run(tmp_path):
    table = load_table_script()
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"runs": {"old:2x4": {"error": "e"}}}))
    table.record_runs(path, {"new:1x8": {"equal_to_jax": True}},
                      table.run_provenance("pytest -k new"))
    runs = json.loads(path.read_text())["runs"]
    assert runs["old:2x4"] == {"error": "e"}
    p = runs["new:1x8"]["provenance"]
    assert p["command"] == "pytest -k new" and p["date"] >= table.PROVENANCE_SINCE
    assert table.provenance_problems({"new:1x8": runs["new:1x8"]}) == []
    assert p["machine"]["cpu_count"] >= 1 and "python" in p["machine"]


def test_left_out_families_and_tasks_are_hub_families_own():
    """The table's lists of what it leaves out are ``hub_families``'s, with
    a reason each (``--derive`` copies them; no silent omission)."""
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "keras_support"))
    from hub_families import DERIVE_ONLY, FAMILIES, LEFT_OUT, TASKS_LEFT_OUT

    table = load_table_script()
    results = json.loads(table.RESULTS.read_text())
    assert results["left_out"] == LEFT_OUT and results["tasks_left_out"] == TASKS_LEFT_OUT
    assert set(results["derived"]) == set(FAMILIES) | set(DERIVE_ONLY)
    rendered = table.render(results)
    for name, why in {**LEFT_OUT, **TASKS_LEFT_OUT}.items():
        assert f"* `{name}`: {why}" in rendered
