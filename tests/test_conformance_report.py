"""Reports are written as cases finish; hangs and crashes are recorded and the run goes on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conformance.reports.report import ReportWriter, load_report, make_header

CASES = {"cases": [
    {"id": f"neg/{i}", "op": "neg", "mesh": {"shape": [2], "axis_names": ["x"]},
     "inputs": [{"shape": [4, 2], "dtype": "float32", "layout": ["x", None]}]}
    for i in range(6)]}


def test_writer_journal_keeps_finished_cases_and_close_writes_the_report(tmp_path):
    out = tmp_path / "r.json"
    writer = ReportWriter(out, make_header("jax", "jax", "cpu", "simulated"))
    writer.add({"id": "a", "status": "ok"})
    # Mid-run: no report yet, but the journal already holds the case.
    assert not out.exists()
    partial = load_report(out)
    assert [c["id"] for c in partial["cases"]] == ["a"] and partial["interrupted"]
    writer.add({"id": "b", "status": "ok"})
    writer.close()
    final = json.loads(out.read_text())
    assert [c["id"] for c in final["cases"]] == ["a", "b"] and final["interrupted"] is False
    assert not (tmp_path / "r.json.partial").exists()
    assert final["versions"]["parity"] and final["tolerances"]["classes"]["exact"]["rtol"] == 0


def test_a_torn_last_line_is_skipped(tmp_path):
    out = tmp_path / "r.json"
    writer = ReportWriter(out, make_header("jax", "jax", "cpu", "simulated"))
    writer.add({"id": "a", "status": "ok"})
    writer._file.write('{"id": "b", "sta')
    writer._file.flush()
    assert [c["id"] for c in load_report(out)["cases"]] == ["a"]


def _run(tmp_path, env_extra, *extra):
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps(CASES))
    env = {**os.environ, **env_extra}
    return subprocess.run(
        [sys.executable, "-m", "conformance.cli", "run", "--backend", "jax", "--cases",
         str(cases), "--out", str(tmp_path / "r.json"), "--quiet", *extra],
        env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.slow
def test_a_hanging_case_and_a_crashing_case_are_recorded_and_the_run_goes_on(tmp_path):
    proc = _run(tmp_path, {"PARITY_CONFORMANCE_HANG_ON": "neg/1",
                           "PARITY_CONFORMANCE_CRASH_ON": "neg/3"}, "--timeout", "3")
    assert proc.returncode == 0, proc.stderr
    report = load_report(tmp_path / "r.json")
    by_id = {c["id"]: c for c in report["cases"]}
    assert len(by_id) == 6
    assert by_id["neg/1"]["error"]["type"] == "Timeout"
    assert by_id["neg/3"]["error"]["type"] == "Crash"
    assert by_id["neg/3"]["error"]["category"] == "other"
    for ok in ("neg/0", "neg/2", "neg/4", "neg/5"):
        assert by_id[ok]["status"] == "ok", by_id[ok]


@pytest.mark.slow
def test_killing_the_run_keeps_the_finished_cases(tmp_path):
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps(CASES))
    env = {**os.environ, "PARITY_CONFORMANCE_HANG_ON": "neg/4"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "conformance.cli", "run", "--backend", "jax", "--cases",
         str(cases), "--out", str(tmp_path / "r.json"), "--quiet", "--timeout", "600"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    journal = tmp_path / "r.json.partial"
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline:
            if journal.exists() and len(journal.read_text().splitlines()) >= 5:
                break
            time.sleep(0.2)
        time.sleep(0.5)
        workers = _children(proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the runner, no clean-up
        proc.wait()
    report = load_report(tmp_path / "r.json")
    assert report["interrupted"] is True
    assert [c["id"] for c in report["cases"]] == [f"neg/{i}" for i in range(4)]
    # The worker (hung on neg/4) notices its runner is gone and exits.
    assert workers
    deadline = time.monotonic() + 15
    while any(os.path.exists(f"/proc/{w}") for w in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(os.path.exists(f"/proc/{w}") for w in workers)


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry))
    return out


def test_reports_name_parity_s_version_when_it_runs_from_a_checkout(monkeypatch):
    import importlib.metadata

    import parity
    from conformance.reports.report import versions

    real = importlib.metadata.version

    def not_installed(name):
        if name == "parity":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert versions()["parity"] == parity.__version__
