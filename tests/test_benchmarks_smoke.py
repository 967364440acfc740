"""``python -m benchmarks --quick`` prints the table and writes the JSON (no timing asserts)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

# benchmarks/ is not an installed package: it runs from the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def test_quick_benchmarks_print_a_table_and_write_json(tmp_path, capsys):
    from benchmarks.__main__ import main

    out = tmp_path / "results.json"
    assert main(["--quick", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "parity benchmarks" in printed and "memory" in printed
    data = json.loads(out.read_text())
    assert data["schema"] == "parity.benchmarks/1" and data["quick"] is True
    assert data["machine"]["torch"]
    # what scripts/measurements.py needs to render the file: date, commit, command
    prov = data["provenance"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", prov["date"]) and re.fullmatch(r"[0-9a-f]{7,40}", prov["commit"])
    assert prov["command"] == f"python -m benchmarks --quick --out {out}"
    families = {row["family"] for row in data["rows"]}
    assert {"memory", "collectives", "keras", "conformance", "cuda"} <= families
    for row in data["rows"]:
        # a figure, or a row that says why there is none
        assert (row["ratio"] is not None) or row["status"] != "ok", row


def test_unavailable_pieces_are_rows_not_figures():
    from benchmarks.common import Row, unavailable

    row = unavailable("cuda", "all_reduce", "no CUDA device")
    assert row.status.startswith("not available: ") and row.ratio is None and row.verdict == ""
    assert Row("x", "y", 1.2, 1.0, goal=1.1).verdict == "missed by 9.1%"
    assert Row("x", "y", 1.0, 1.0, goal=1.05).verdict == "met"


def test_the_mode_floor_prototype_measures_every_stand_in():
    # benchmarks/mode_floor.py (a prototype: stand-ins for a cheaper mode),
    # in a child process: the fake process group is process-wide.
    import subprocess

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-m", "benchmarks.mode_floor", "--quick"],
                          capture_output=True, text=True, cwd=root, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {row["case"]: row for row in map(json.loads, proc.stdout.splitlines())}
    assert set(rows) == {"python_mode", "c_mode", "dispatch_mode", "jax_semantics",
                         "registered_rule"}
    for row in rows.values():
        measured = row["parity_s"] is not None and row["parity_s"] > 0 and row["raw_s"] > 0
        assert measured or row["note"].startswith("not available: "), row
