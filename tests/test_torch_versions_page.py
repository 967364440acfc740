"""docs/torch-versions.md is generated from its results file
(``scripts/torch_versions.py``), which is recorded from two semantics diffs
(the parity and the plain-DTensor column, each older torch -> newer torch
against one JAX report); diffs of other releases or columns are refused."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("torch_versions", ROOT / "scripts" / "torch_versions.py")
torch_versions = importlib.util.module_from_spec(_spec)
sys.modules["torch_versions"] = torch_versions
_spec.loader.exec_module(torch_versions)


def _diff(semantics: str, old: str = "2.13.0+cpu", new: str = "2.15.0+cu132",
          cases: tuple = (("a/8/x", "same", "match", "match", ""),
                          ("b/8/x", "fixed", "error-differs", "match", "was: boom"),
                          ("c/8/x", "regressed", "match", "values-differ", "max |d| 1"))) -> dict:
    side = lambda torch: {"reference": {"versions": {"jax": "0.10.2"}},  # noqa: E731
                          "candidate": {"semantics": semantics, "versions": {"torch": torch}}}
    rows = [{"id": i, "change": c, "old": o, "new": n, "reason": r} for i, c, o, n, r in cases]
    summary = {c: sum(r["change"] == c for r in rows) for c in torch_versions.CHANGES}
    return {"schema": torch_versions.DIFF_SCHEMA, "old": side(old), "new": side(new),
            "summary": summary, "ok": not summary["regressed"], "cases": rows}


def _record(parity: dict, raw: dict) -> dict:
    return torch_versions.record(parity, raw, date="2026-11-28", commit="c4c3d03", machine="m",
                                 command=["c"], notes=["n"])


def test_the_committed_page_is_the_generated_one():
    assert torch_versions.main(["--check"]) == 0, "run python scripts/torch_versions.py"


def test_the_committed_results_file_names_both_columns_and_two_releases():
    data = json.loads(torch_versions.RESULTS.read_text())
    assert [row[0] for row in data["rows"]] == [label for _, label in torch_versions.COLUMNS]
    for row in data["rows"]:
        counted = dict(zip(data["columns"][1:], row[1:]))
        name = "parity" if row[0].startswith("parity") else "raw"
        moved = data["changes"][name]
        assert sum(v for k, v in counted.items() if k != "same") == len(moved)
        for change in counted:
            if change != "same":
                assert counted[change] == sum(c["change"] == change for c in moved)


def test_record_counts_each_column_and_keeps_only_the_cases_that_moved():
    data = _record(_diff("jax_semantics"), _diff("raw-dtensor", cases=(("a/8/x", "same", "m", "m", ""),)))
    assert data["title"] == "Both torch columns across torch versions: 2.13.0 against 2.15.0"
    parity_row, raw_row = data["rows"]
    assert dict(zip(data["columns"], parity_row)) == {
        "column": "parity on DTensor", "regressed": 1, "fixed": 1, "changed": 0, "placement moved": 0,
        "same": 1, "added": 0, "removed": 0}
    assert raw_row[data["columns"].index("same")] == 1
    assert [c["id"] for c in data["changes"]["parity"]] == ["b/8/x", "c/8/x"]
    assert data["changes"]["raw"] == []


def test_the_page_lists_each_moved_case_under_its_change():
    data = _record(_diff("jax_semantics"), _diff("raw-dtensor", cases=(("a/8/x", "same", "m", "m", ""),)))
    page = torch_versions.render(data, "docs/results/x.json")
    parity_part, raw_part = page.split("## Plain DTensor", 1)
    assert "### regressed (1)" in parity_part and "| `c/8/x` | match | values-differ | max \\|d\\| 1 |" in parity_part
    assert "### fixed (1)" in parity_part and "`b/8/x`" in parity_part
    assert "`a/8/x`" not in page
    assert "Every case is the same." in raw_part


@pytest.mark.parametrize("change, problem", [
    ({"schema": "parity.comparison/1"}, "is not 'parity.semantics-diff/1'"),
    ({"new": {"candidate": {"semantics": "jax_semantics", "versions": {"torch": "2.13.0+cpu"}}}},
     "both sides ran torch '2.13.0+cpu'"),
])
def test_a_diff_that_is_not_two_torch_releases_is_refused(tmp_path, change, problem):
    path = tmp_path / "d.json"
    path.write_text(json.dumps({**_diff("jax_semantics"), **change}))
    with pytest.raises(torch_versions.VersionsFileError, match="d.json") as err:
        torch_versions.load_diff(path)
    assert problem in err.value.problem


def test_record_refuses_diffs_of_other_releases_or_the_wrong_column():
    with pytest.raises(torch_versions.VersionsFileError, match="diff the same two releases"):
        _record(_diff("jax_semantics"), _diff("raw-dtensor", new="2.14.1"))
    with pytest.raises(torch_versions.VersionsFileError, match="--raw.*'jax_semantics', not 'raw-dtensor'"):
        _record(_diff("jax_semantics"), _diff("jax_semantics"))
