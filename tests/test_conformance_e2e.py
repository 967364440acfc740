"""A case file written by someone else runs through `parity run` on both
backends and `parity compare`, with SPEC's verdicts (a handful of cases)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conformance.reports.compare import VERDICTS
from conformance.reports.report import load_report

MESH = {"shape": [2, 4], "axis_names": ["data", "model"]}
USER_CASES = {"cases": [
    {"id": "matmul/contract-model", "op": "matmul", "mesh": MESH,
     "inputs": [{"shape": [8, 12], "dtype": "float32", "layout": ["data", "model"]},
                {"shape": [12, 8], "dtype": "float32", "layout": ["model", None]}],
     "kwargs": {}, "grad": False},
    {"id": "add/rows", "op": "add", "mesh": MESH,
     "inputs": [{"shape": [8, 4], "dtype": "float32", "layout": ["data", None]},
                {"shape": [8, 4], "dtype": "float32", "layout": ["data", None]}],
     "grad": True},
    {"id": "exp/indivisible", "op": "exp", "mesh": MESH,
     "inputs": [{"shape": [6, 4], "dtype": "float32", "layout": ["model", None]}]},
    {"id": "sum/explicit-values", "op": "sum", "mesh": {"shape": [8], "axis_names": ["x"]},
     "inputs": [{"values": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0],
                            [1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0]],
                 "dtype": "float32", "layout": ["x", None]}],
     "kwargs": {"axis": 0, "keepdims": False}},
    {"id": "all_reduce/model", "op": "all_reduce", "mesh": MESH,
     "inputs": [{"shape": [8, 8], "dtype": "float32", "layout": ["data", "model"]}],
     "kwargs": {"op": "sum", "axis_name": "model"}},
    {"id": "distribute/reshard", "op": "distribute_tensor", "mesh": MESH,
     "inputs": [{"shape": [8, 8], "dtype": "float32", "layout": ["data", None]}],
     "kwargs": {"target": [None, ["model", "data"]]}},
]}


def parity(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", *args],
                          capture_output=True, text=True, timeout=400)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    d = tmp_path_factory.mktemp("e2e")
    cases = d / "user_cases.json"
    cases.write_text(json.dumps(USER_CASES))
    procs = []
    for name, extra in (("jax", ["--backend", "jax"]), ("torch", ["--backend", "torch"]),
                        ("raw", ["--backend", "torch", "--raw"])):
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "conformance.cli", "run", *extra, "--cases", str(cases),
             "--out", str(d / f"{name}.json")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for proc in procs:
        out, _ = proc.communicate(timeout=400)
        assert proc.returncode == 0, out
    return d


def test_only_the_file_cases_run_and_reports_record_versions_device_mode(reports):
    for name in ("jax", "torch", "raw"):
        report = load_report(reports / f"{name}.json")
        assert [c["id"] for c in report["cases"]] == [c["id"] for c in USER_CASES["cases"]]
        assert report["device"] == "cpu" and report["mode"] == "simulated"
        assert report["versions"]["parity"] and report["versions"]["numpy"]
        assert report["semantics"]
    jax_report = load_report(reports / "jax.json")
    assert jax_report["versions"]["jax"]
    by_id = {c["id"]: c for c in jax_report["cases"]}
    assert by_id["exp/indivisible"]["error"]["category"] == "indivisible"
    assert by_id["add/rows"]["outputs"][0]["rule"] == "typed"
    assert by_id["add/rows"]["outputs"][0]["spec"] == [["data"], []]
    assert len(by_id["add/rows"]["grads"]) == 2
    assert by_id["matmul/contract-model"]["outputs"][0]["rule"] == "chosen"
    assert by_id["all_reduce/model"]["outputs"][0]["shape"] == [8, 2]


def test_compare_gives_spec_verdicts(reports):
    proc = parity("compare", str(reports / "jax.json"), str(reports / "torch.json"),
                  "--json", str(reports / "c.json"), "--md", str(reports / "c.md"), check=False)
    comp = json.loads((reports / "c.json").read_text())
    verdicts = {c["id"]: c["verdict"] for c in comp["cases"]}
    assert set(verdicts.values()) <= set(VERDICTS)
    # Every case of the file, each with its verdict: parity holds on all six.
    assert verdicts == {
        "matmul/contract-model": "match",  # JAX's "chosen" placement: a note at most
        "add/rows": "match",
        "exp/indivisible": "both-reject",
        "sum/explicit-values": "match",
        "all_reduce/model": "match",
        "distribute/reshard": "match",
    }
    assert comp["ok"] is True
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_raw_dtensor_shows_what_it_gets_wrong(reports):
    parity("compare", str(reports / "jax.json"), str(reports / "raw.json"),
           "--json", str(reports / "raw.json.cmp"), check=False)
    comp = json.loads((reports / "raw.json.cmp").read_text())
    verdicts = {c["id"]: c["verdict"] for c in comp["cases"]}
    assert sorted(verdicts) == sorted(c["id"] for c in USER_CASES["cases"])
    assert "missing" not in verdicts.values()
    # Plain DTensor splits the indivisible dim unevenly instead of refusing it,
    # and has no shard_map-style all_reduce.
    assert verdicts["exp/indivisible"] == "error-differs"
    assert verdicts["all_reduce/model"] == "error-differs"


def test_cuda_without_a_gpu_exits_3_unless_asked_to_skip(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present; the no-GPU path does not apply")
    proc = parity("run", "--backend", "torch", "--device", "cuda", "--op", "neg",
                  "--out", str(tmp_path / "r.json"), check=False)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "no CUDA device is visible" in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert not (tmp_path / "r.json").exists()
    proc = parity("run", "--backend", "torch", "--device", "cuda", "--op", "neg",
                  "--skip-without-gpu", "--out", str(tmp_path / "r.json"))
    assert "skipping" in proc.stdout and not (tmp_path / "r.json").exists()


def test_no_run_leaves_an_empty_log(reports):
    for name in ("jax", "torch", "raw"):
        log = reports / f"{name}.json.log"
        assert not log.exists() or log.stat().st_size > 0, f"{log} is empty"


def _fits(obj: dict, typed) -> None:
    keys = set(obj)
    assert typed.__required_keys__ <= keys, (typed.__name__, typed.__required_keys__ - keys)
    assert keys <= typed.__required_keys__ | typed.__optional_keys__, (
        typed.__name__, keys - typed.__required_keys__ - typed.__optional_keys__)


def test_every_report_entry_is_the_typed_record_conformance_entries_declares(reports):
    from conformance.records.entries import ArrayRecord, CaseEntry, ErrorRecord, Tolerance

    for name in ("jax", "torch", "raw"):
        for entry in load_report(reports / f"{name}.json")["cases"]:
            _fits(entry, CaseEntry)
            _fits(entry["tolerance"], Tolerance)
            for array in entry["outputs"] + entry["grads"]:
                _fits(array, ArrayRecord)
            if entry["error"] is not None:
                _fits(entry["error"], ErrorRecord)


def test_every_comparison_row_is_the_typed_record_conformance_entries_declares(reports):
    from conformance.records.entries import CaseSide, Comparison, VerdictRow

    parity("compare", str(reports / "jax.json"), str(reports / "torch.json"),
           "--json", str(reports / "typed.json"), check=False)
    comparison = json.loads((reports / "typed.json").read_text())
    _fits(comparison, Comparison)
    assert len(comparison["cases"]) == len(USER_CASES["cases"])
    for row in comparison["cases"]:
        _fits(row, VerdictRow)
        for side in (row["reference"], row["candidate"]):
            _fits(side, CaseSide)


# A real divergence, no hook: integer floor division by zero is a value on
# JAX (XLA defines it) and an error on torch (ZeroDivisionError), DTensor or
# not. exp/indivisible: raw DTensor diverges (it splits the dim unevenly),
# parity refuses as JAX does.
LINE = {"shape": [8], "axis_names": ["x"]}
DIVERGES = {"id": "floor_divide/int-by-zero", "op": "floor_divide", "mesh": LINE,
            "inputs": [{"shape": [8], "dtype": "int32", "layout": ["x"]},
                       {"shape": [8], "dtype": "int32", "layout": ["x"]}],
            "values": [[1, 2, 3, 4, 5, 6, 7, 8], [0, 1, 0, 1, 0, 1, 0, 1]]}
RAW_ONLY = {"id": "exp/indivisible", "op": "exp", "mesh": LINE,
            "inputs": [{"shape": [6], "dtype": "float32", "layout": ["x"]}]}


@pytest.mark.parametrize("cases, status", [([DIVERGES, RAW_ONLY], 1), ([RAW_ONLY], 0)],
                         ids=["parity-diverges", "only-raw-diverges"])
def test_conformance_exits_1_exactly_when_the_parity_column_diverges(tmp_path, cases, status):
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"cases": cases}))
    proc = parity("conformance", "--cases", str(path), "--out-dir", str(tmp_path / "out"),
                  check=False)
    assert proc.returncode == status, proc.stdout + proc.stderr
    parity_cmp = json.loads((tmp_path / "out" / "parity-vs-jax.json").read_text())
    raw_cmp = json.loads((tmp_path / "out" / "raw-vs-jax.json").read_text())
    verdicts = {c["id"]: c["verdict"] for c in parity_cmp["cases"]}
    assert verdicts["exp/indivisible"] == "both-reject"
    assert {c["id"]: c["verdict"] for c in raw_cmp["cases"]}["exp/indivisible"] == "error-differs"
    if status:
        assert verdicts["floor_divide/int-by-zero"] == "error-differs"
        assert "parity diverges from JAX in 1 cases" in proc.stdout + proc.stderr
