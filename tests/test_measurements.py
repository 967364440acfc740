"""The measurement pages are generated from results files that record date,
machine and commit (``scripts/measurements.py``): the committed pages equal
the generated ones, every results file carries its provenance, and the
generator refuses a file that does not."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("measurements", ROOT / "scripts" / "measurements.py")
measurements = importlib.util.module_from_spec(_spec)
sys.modules["measurements"] = measurements  # dataclasses look their module up there
_spec.loader.exec_module(measurements)


def test_the_committed_pages_are_the_generated_ones():
    pages = measurements.render(measurements.load_all())
    assert set(pages) == {"docs/measurements.md", "benchmarks/README.md"}
    for page, text in pages.items():
        assert (ROOT / page).read_text() == text, (
            f"{page} differs from its results files: run python scripts/measurements.py")
    assert measurements.main(["--check"]) == 0


def test_every_table_records_date_machine_commit_and_source():
    tables = measurements.load_all()
    assert len(tables) >= 10
    for t in tables:
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", t.date), t.results_file
        assert t.machine and t.source and t.command, t.results_file
        assert all(re.fullmatch(r"[0-9a-f]{7,40}", c) for c in t.commits), t.results_file
        assert t.rows and all(len(r) == len(t.columns) for r in t.rows), t.results_file


def test_each_table_on_a_page_states_its_provenance():
    text = (ROOT / "docs" / "measurements.md").read_text()
    for t in measurements.load_all():
        if t.page == "docs/measurements.md":
            block = text.split(f"### {t.title}\n", 1)[1].split("\n### ", 1)[0]
            assert f"Measured {t.date} at {', '.join(t.commits)}" in block, t.title
            assert f"`{t.results_file}`" in block, t.title


GOOD = {"schema": "parity.measurement/1", "page": "docs/measurements.md", "order": 1, "title": "t",
        "date": "2026-11-23", "machine": "m", "commit": "034bd89", "command": "c", "source": "s",
        "columns": ["a", "b"], "rows": [[1, 2]]}


@pytest.mark.parametrize("change, problem", [
    ({"commit": None}, "commit"),
    ({"commit": "HEAD"}, "commit"),
    ({"date": "23 Nov"}, "date"),
    ({"rows": [[1, 2, 3]]}, "row 0 has 3 cells"),
    ({"page": "README.md"}, "page"),
    ({"schema": "other/1"}, "schema"),
    ({"machine": ...}, "missing ['machine']"),
])
def test_a_results_file_without_its_provenance_is_refused(tmp_path, change, problem):
    data = {**GOOD, **change}
    data = {k: v for k, v in data.items() if v is not ...}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    with pytest.raises(measurements.ResultsFileError, match=re.escape(problem)) as err:
        measurements.load_measurement(path)
    assert err.value.path.endswith("r.json") and problem.split()[0] in err.value.problem


def test_a_good_results_file_renders(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(GOOD))
    table = measurements.load_measurement(path)
    assert table.commits == ("034bd89",) and table.rows == (("1", "2"),)


def test_a_changed_figure_makes_the_check_fail(tmp_path, monkeypatch):
    results = tmp_path / "results"
    results.mkdir()
    for f in (ROOT / "docs" / "results").glob("*.json"):
        (results / f.name).write_text(f.read_text())
    data = json.loads((results / "conformance-default.json").read_text())
    data["rows"][0][2] += 1  # one more parity match than the page says
    (results / "conformance-default.json").write_text(json.dumps(data))
    pages = measurements.render(measurements.load_all(results))
    assert pages["docs/measurements.md"] != (ROOT / "docs" / "measurements.md").read_text()


def test_a_changed_benchmark_figure_makes_the_readme_block_stale(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    for f in (ROOT / "docs" / "results").glob("*.json"):
        (results / f.name).write_text(f.read_text())
    data = json.loads((results / "bench-donation.json").read_text())
    assert data["page"] == "benchmarks/README.md"
    data["rows"][0][1] = "1.500 (0.960)"  # a figure the committed README does not show
    (results / "bench-donation.json").write_text(json.dumps(data))
    page = measurements.render(measurements.load_all(results))["benchmarks/README.md"]
    committed = (ROOT / "benchmarks" / "README.md").read_text()
    assert page != committed and "1.500 (0.960)" in page and "1.500 (0.960)" not in committed


def test_the_benchmarks_readme_states_no_figure_outside_its_generated_block():
    text = (ROOT / "benchmarks" / "README.md").read_text()
    assert measurements.handwritten_figures(text) == []


def test_a_handwritten_dated_pass_fails_the_check(monkeypatch, capsys):
    text = (ROOT / "benchmarks" / "README.md").read_text()
    added = "\n## Donation, 2026-11-24, sixth pass\n\n`all_reduce` 12.4 us, 1.02x raw, 7.2 cases/s\n"
    found = measurements.handwritten_figures(text + added)
    assert found == ["2026-11-24", "12.4 us", "1.02x", "7.2 cases/s"]
    real = measurements.render
    monkeypatch.setattr(measurements, "render", lambda tables: {
        page: body + added if page == "benchmarks/README.md" else body
        for page, body in real(tables).items()})
    assert measurements.main(["--check"]) == 1
    assert "states ['2026-11-24', '12.4 us', '1.02x', '7.2 cases/s'] outside" in capsys.readouterr().err


def test_the_design_pages_state_no_measured_figure():
    # docs/architecture.md describes the design; its figures are the
    # generated tables it points to (a hand-written "1.7 us over plain
    # DTensor" there once contradicted the generated "+11.0 us").
    for page in measurements.FIGURE_FREE:
        assert measurements.measured_figures((ROOT / page).read_text()) == [], page


def test_a_figure_on_a_design_page_fails_the_check(monkeypatch, capsys, tmp_path):
    page = tmp_path / "architecture.md"
    page.write_text("The clean call costs 1.7 us over plain DTensor (4.0x).\n")
    monkeypatch.setattr(measurements, "FIGURE_FREE", (str(page),))
    assert measurements.main(["--check"]) == 1
    assert "states ['1.7 us', '4.0x']" in capsys.readouterr().err
