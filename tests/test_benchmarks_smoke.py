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


def test_a_count_row_renders_as_a_count_on_the_table_and_the_page():
    import importlib.util

    from benchmarks.common import Row, human_value

    row = Row("collective_counts", "step", 3, 2, unit="n", goal=1.0)
    assert human_value(row.parity, row.unit) == "3" and row.verdict == "missed by 50.0%"
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("measurements_for_smoke", root / "scripts" / "measurements.py")
    measurements = importlib.util.module_from_spec(spec)
    sys.modules["measurements_for_smoke"] = measurements
    spec.loader.exec_module(measurements)
    assert measurements._human(3, "n") == "3" and measurements._human(0.003, "s") == "3.00 ms"


def test_the_eager_profile_account_is_a_results_file_the_generator_accepts(tmp_path):
    import importlib.util

    from benchmarks import keras_eager_profile as kep

    def rank(r):
        return {"rank": r, "wall_ms": 80.0 + r, "cpu_ms": 20.0 + r,
                "profiler": {"aten_self_ms": 10.0, "collectives_self_ms": 5.0, "other_self_ms": 60.0,
                             "aten_ops": 813.0, "collectives_per_step": {"c10d::allreduce_": 1.0}},
                "calls": {name: 2.0 for name in kep.COUNTED},
                "cumulative_ms": {name: 1.5 for name in kep.COUNTED},
                "callers": {name: {"collectives/x.py:f": 2.0} for name in kep.BY_CALLER},
                "python_self_ms": {"keras": 3.0, "DTensor (torch/distributed/tensor)": 4.0}}

    summary = {"steps": 10, "load": "1.0 -> 1.2", "command": "python -m benchmarks.keras_eager_profile",
               "ranks": [rank(0), rank(1)]}
    path = tmp_path / "bench-eager-profile.json"
    path.write_text(json.dumps(kep.measurement(summary, 40.0, 9.0)))
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("measurements_for_profile", root / "scripts" / "measurements.py")
    measurements = importlib.util.module_from_spec(spec)
    sys.modules["measurements_for_profile"] = measurements
    spec.loader.exec_module(measurements)
    table = measurements.load_measurement(path)
    assert table.page == "benchmarks/README.md" and table.columns == ("per step", "rank 0", "rank 1")
    cells = {row[0]: row[1:] for row in table.rows}
    assert cells["step wall time, unprofiled median"] == ("80.0 ms", "81.0 ms")
    assert cells["DTensor.redistribute: by caller"] == ("2 from collectives/x.py:f",) * 2
    assert cells["step CPU time (the process, all threads), unprofiled"] == ("20.0 ms", "21.0 ms")
    assert cells["JAX jit of the same step on 2 gloo processes (rank 0): wall, CPU"] == (
        "40.0 ms, 9.0 ms", "-")


def test_the_tp_eager_profile_pairs_each_round_against_jax_in_a_results_file(tmp_path):
    import importlib.util

    from benchmarks import tp_eager_profile as tep

    def side(cpu_ms, wall_ms):
        return {"cpu_s": cpu_ms / 1e3, "step_s": wall_ms / 1e3}

    rounds = [{"load": "1.0 1.0 1.0", "parity": side(3.0, 9.0), "plain": side(2.0, 6.0),
               "jax": side(1.0, 2.0)},
              {"load": "2.0 1.0 1.0", "parity": side(4.0, 9.0), "plain": side(2.0, 6.0),
               "jax": side(2.0, 2.0)}]
    summary = {"steps": 50, "load": "1.0 -> 2.0", "command": "python -m benchmarks.tp_eager_profile",
               "rounds": rounds, "profile": {"python_self_ms": {"DTensor": 3.0, "parity mode": 1.0}}}
    path = tmp_path / "bench-tp-eager-cpu.json"
    path.write_text(json.dumps(tep.measurement(summary)))
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("measurements_for_tp", root / "scripts" / "measurements.py")
    measurements = importlib.util.module_from_spec(spec)
    sys.modules["measurements_for_tp"] = measurements
    spec.loader.exec_module(measurements)
    cells = {row[0]: row[1:] for row in measurements.load_measurement(path).rows}
    # each round's ratio is against JAX in that round, not another's
    assert cells["round 1 (load 1.0 1.0 1.0): CPU per step"] == (
        "3.00 ms (3.00x)", "2.00 ms (2.00x)", "1.00 ms (1.00x)")
    assert cells["round 2 (load 2.0 1.0 1.0): CPU per step"][0] == "4.00 ms (2.00x)"
    assert cells["parity's step, profiled: self CPU in DTensor (cProfile share)"][0] == "75%"


def test_the_random_rows_measure_every_mode_against_plain_torch():
    from benchmarks import random_ops

    rows = random_ops.rows(quick=True)
    modes = {mode for row in rows for mode in ("invariant", "counter", "per_rank") if f"'{mode}'" in row.case}
    assert modes == {"invariant", "counter", "per_rank"} and len(rows) == 6
    for row in rows:
        assert row.family == "random" and row.parity > 0 and row.raw > 0, row
        assert row.note.startswith("vs plain torch "), row


def test_collective_launches_count_a_combined_launch_once():
    from benchmarks.collective_counts import launches

    assert launches({"all-reduce": 3, "all-gather": 2}) == 5
    assert launches({"all-reduce": {"launches": 2, "operands": 4}}) == 2


def test_the_keras_hub_row_says_why_when_keras_hub_is_missing(tmp_path, monkeypatch):
    from benchmarks import keras_hub_step

    monkeypatch.setattr(keras_hub_step, "OVERLAY", tmp_path / "no-overlay")
    monkeypatch.setenv("PYTHONPATH", "")
    (row,) = keras_hub_step.run({})
    assert row.family == "keras_hub" and row.ratio is None
    assert row.status.startswith("not available: keras-hub not importable"), row.status
    assert "scripts/keras_hub.sh" in row.status
