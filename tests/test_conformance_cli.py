"""The ``parity`` command line: one clear line and exit 2 for each misuse,
exit codes in --help, compare's refusals and warnings, semantics diffs."""

from __future__ import annotations

import json

import pytest

from conformance.reports.compare import compare_reports
from conformance.reports.diff import diff_comparisons, summary_line
from parity.cli import main


@pytest.mark.parametrize("argv, says", [
    (["--limit", "0"], "--limit: 0 must be at least 1"),
    (["--timeout", "-1"], "--timeout: -1 must be more than 0 seconds"),
    (["--mesh", "2by4"], "--mesh '2by4' is not a mesh shape"),
    (["--op", "matmull"], "--op 'matmull' is not an op of the catalogue; did you mean matmul"),
    (["--mesh", "3x3"], "the selection (--mesh 3x3) matches none of the"),
    (["-k", "zzz"], "the selection (-k 'zzz') matches none of the"),
    (["--op", "matmul", "-k", "zzz"], "the selection (--op matmul -k 'zzz') matches none"),
])
def test_a_bad_run_argument_gives_one_line_naming_it_and_exit_2(argv, says, tmp_path, capsys):
    assert main(["run", "--backend", "jax", "--out", str(tmp_path / "r.json"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "r.json").exists()


def test_an_unwritable_out_gives_one_line_naming_it(capsys):
    assert main(["run", "--backend", "jax", "--op", "neg", "--out", "/proc/x/r.json"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--out '/proc/x/r.json' cannot be written" in err and len(err.splitlines()) == 1


def test_help_documents_the_exit_codes(capsys):
    for command in ("run", "compare", "conformance"):
        assert main([command, "--help"]) == 0
        out = capsys.readouterr().out
        assert "exit status" in out and "130" in out and "2 " in out


def test_compare_names_a_file_that_is_not_json(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["compare", str(bad), str(bad)]) == 2
    assert f"{bad}: not JSON" in capsys.readouterr().err


def test_compare_refuses_a_case_file_naming_the_schema_it_expected(tmp_path, capsys):
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps({"cases": []}))
    assert main(["compare", str(cases), str(cases)]) == 2
    err = capsys.readouterr().err
    assert "not a semantics report: expected \"schema\": 'parity.report/1'" in err
    assert "a case file?" in err


def _report(backend, *ids, error=None):
    cases = [{"id": i, "op": "neg", "status": "error" if error else "ok",
              "error": {"category": error, "type": "X", "message": "m"} if error else None,
              "outputs": [], "grads": []} for i in ids]
    return {"schema": "parity.report/1", "backend": backend, "column": backend, "cases": cases}


def test_compare_warns_when_the_reference_is_not_jax(tmp_path, capsys):
    a = tmp_path / "a.json"
    a.write_text(json.dumps(_report("torch", "x")))
    assert main(["compare", str(a), str(a)]) == 0
    assert "not the JAX reference" in capsys.readouterr().err


def test_compare_says_when_the_case_sets_do_not_overlap(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_report("jax", "x", "y")))
    b.write_text(json.dumps(_report("torch", "z")))
    assert main(["compare", str(a), str(b)]) == 1
    assert "share no case id" in capsys.readouterr().err


def test_a_semantics_diff_names_fixed_regressed_and_exits_1_on_a_regression(tmp_path, capsys):
    ref = _report("jax", "a", "b")
    ref["cases"][1] = {**ref["cases"][1], "status": "error",
                       "error": {"category": "indivisible", "type": "X", "message": "m"}}
    old = compare_reports(ref, _report("torch", "a", "b", error="indivisible"))
    new = compare_reports(ref, _report("torch", "a", "b"))
    diff = diff_comparisons(old, new)
    changes = {r["id"]: r["change"] for r in diff["cases"]}
    assert changes == {"a": "fixed", "b": "regressed"}
    assert "1 fixed, 1 regressed" in summary_line(diff) and not diff["ok"]
    paths = [tmp_path / "old.json", tmp_path / "new.json"]
    for path, comp in zip(paths, (old, new)):
        path.write_text(json.dumps(comp))
    assert main(["compare", *map(str, paths)]) == 1
    assert "semantics diff" in capsys.readouterr().out
    assert main(["compare", *map(str, paths[::-1])]) == 1  # b regressed the other way round


def test_a_placement_that_moves_while_both_hold_is_reported():
    def comp(spec):
        return {"reference": {}, "candidate": {}, "cases": [
            {"id": "a", "verdict": "match", "reason": "",
             "reference": {"outputs": [{"spec": spec}], "grads": []},
             "candidate": {"outputs": [{"spec": spec}], "grads": []}}]}

    diff = diff_comparisons(comp([["x"], []]), comp([[], []]))
    assert diff["cases"][0]["change"] == "placement moved" and diff["ok"]


@pytest.mark.slow
def test_sigterm_in_conformance_keeps_finished_cases_and_writes_comparison_and_html(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "reports"
    proc = subprocess.Popen([sys.executable, "-m", "conformance.cli", "conformance", "--op", "neg",
                             "--op", "matmul", "--op", "einsum", "--out-dir", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    journal = out / "torch.json.partial"  # the slowest column
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.exists() and len(journal.read_text().splitlines()) >= 4:
            break
        time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()[0]
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, output
    comparison = json.loads((out / "parity-vs-jax.json").read_text())
    assert comparison["interrupted"] is True and comparison["total"] >= 1
    assert (out / "report.html").exists() and "interrupted" in output


# The front door (issue 22, item 6): each defect found by trying the CLI as a new user.

def test_an_out_that_is_a_directory_is_refused_before_any_case_runs(tmp_path, capsys):
    reports = tmp_path / "reports"
    reports.mkdir()
    assert main(["run", "--backend", "jax", "--op", "matmul", "--out", str(reports)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--out {str(reports)!r} is a directory; name a file in it" in err, err
    assert len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports"]  # no .tmp/.partial/.log
    assert list(reports.iterdir()) == []


def test_an_out_under_a_regular_file_is_refused_naming_the_file(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    out = notes / "x.json"
    assert main(["run", "--backend", "jax", "--op", "neg", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"lies under {str(notes)!r}, which is a file, not a directory" in err, err
    assert len(err.splitlines()) == 1 and "File exists" not in err
    assert notes.read_text() == "mine"


def test_an_out_dir_that_is_a_file_is_refused_by_conformance(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    assert main(["conformance", "--op", "neg", "--out-dir", str(notes)]) == 2
    err = capsys.readouterr().err.strip()
    # names the value passed, not a path derived from it (notes.txt/summary.json)
    assert f"--out-dir {str(notes)!r} is a file, not a directory" in err, err
    assert "summary.json" not in err and len(err.splitlines()) == 1, err
    assert notes.read_text() == "mine"


def test_an_out_dir_under_a_file_names_the_value_passed(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    out_dir = notes / "reports"
    assert main(["conformance", "--op", "neg", "--out-dir", str(out_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--out-dir {str(out_dir)!r} lies under {str(notes)!r}" in err, err
    assert "summary.json" not in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("argv, says", [
    (["run", "--backend", "jax", "--op", "neg", "--out", ""], "--out '' is empty"),
    (["conformance", "--op", "neg", "--out-dir", ""], "--out-dir '' is empty"),
    (["run", "--backend", "jax", "--op", "neg", "--out", "{tmp}/r.json", "--mesh", ""],
     "--mesh '' is not a mesh shape"),
    (["compare", "{tmp}/a.json", "{tmp}/b.json", "--json", ""], "--json '' is empty"),
    (["--bogus", "run"], "'--bogus' comes before a command"),
])
def test_an_empty_or_misplaced_value_is_refused_not_ignored(argv, says, tmp_path, capsys):
    # an empty --mesh once selected every case and ran the whole catalogue;
    # an empty --out named '.', an empty --json was taken for "not given"
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_op_in_a_case_file_suggests_the_closest_names_not_the_list(tmp_path, capsys):
    from conformance.catalogue import OPS

    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps({"cases": [{"id": "x", "op": "matmull", "mesh": {"shape": [8]},
                                            "inputs": [{"shape": [8], "layout": [None]}]}]}))
    assert main(["run", "--backend", "jax", "--cases", str(cases),
                 "--out", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "'matmull' is not an op of the catalogue; did you mean matmul" in err, err
    assert len(err.splitlines()) == 1
    listed = [name for name in OPS if f" {name}," in err or f" {name} " in err]
    assert len(listed) <= 3, listed  # the closest few, never all the ops inline


def test_an_unknown_op_flag_suggests_the_closest_name(tmp_path, capsys):
    assert main(["run", "--backend", "jax", "--op", "sofmax", "--out",
                 str(tmp_path / "r.json")]) == 2
    assert "did you mean softmax" in capsys.readouterr().err


@pytest.mark.parametrize("says", ["", "a warning from the worker\n"])
def test_an_opinfo_run_leaves_its_log_only_when_a_worker_wrote_to_it(monkeypatch, tmp_path, says):
    # `parity run --source opinfo --out R.json` left an empty R.json.log
    # beside every report (the catalogue runner already removed its own); a
    # stand-in worker (no subprocess) that writes ``says`` to the log.
    from conformance.opinfo import runner as opinfo_runner

    class QuietWorker:
        ops = ["neg"]

        def __init__(self, log):
            log.write(says)
            log.flush()

        def send(self, request):
            self.op = request["op"]

        def read(self, timeout):
            return {"done": self.op}

        def kill(self):
            pass

    monkeypatch.setattr(opinfo_runner, "_Worker", QuietWorker)
    out = tmp_path / "r.json"
    opinfo_runner.run_opinfo(["neg"], out=out, progress=False)
    assert out.is_file()
    log = tmp_path / "r.json.log"
    if says:
        assert log.read_text() == says
    else:
        assert not log.exists(), "an empty log was left beside the report"


def test_an_unknown_opinfo_op_suggests_the_closest_names_and_leaves_nothing(monkeypatch, tmp_path,
                                                                          capsys):
    from conformance.opinfo import runner as opinfo_runner

    class Worker:  # a stand-in for the OpInfo worker: its op list only
        ops = ["cumsum", "cumprod", "neg", "nn.functional.relu"]

        def __init__(self, log):
            pass

        def kill(self):
            pass

    monkeypatch.setattr(opinfo_runner, "_Worker", Worker)
    out = tmp_path / "r.json"
    assert main(["run", "--backend", "torch", "--source", "opinfo", "--op", "cumsumm",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "no float32 OpInfo named 'cumsumm': did you mean cumsum?" in err, err
    assert len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # no report, no empty journal or log


def _verdicts(verdict_ids):
    """A comparison whose cases have the given ids, the reference holding and
    the candidate differing on the ids in ``verdict_ids['differs']``."""
    ids = verdict_ids["holds"] + verdict_ids["differs"]
    ref = _report("jax", *ids)
    cand = _report("torch", *ids)
    for case in cand["cases"]:
        if case["id"] in verdict_ids["differs"]:
            case.update(status="error", error={"category": "indivisible", "type": "X",
                                               "message": "m"})
    return compare_reports(ref, cand)


def test_conformance_exits_1_when_the_parity_column_diverges_and_not_for_raw():
    from conformance.commands.suite import exit_status

    holds = _verdicts({"holds": ["a", "b"], "differs": []})
    differs = _verdicts({"holds": ["a"], "differs": ["b"]})
    assert holds["ok"] and not differs["ok"]
    assert exit_status({"parity": holds, "raw DTensor": holds}, failed=False,
                       interrupted=False) == 0
    assert exit_status({"parity": differs, "raw DTensor": holds}, failed=False,
                       interrupted=False) == 1
    assert exit_status({"parity": holds, "raw DTensor": differs}, failed=False,
                       interrupted=False) == 0  # the raw column is informational
    assert exit_status({"parity": holds, "raw DTensor": holds}, failed=True,
                       interrupted=False) == 1
    assert exit_status({"parity": differs, "raw DTensor": holds}, failed=False,
                       interrupted=True) == 130


def test_conformance_help_says_a_diverging_parity_column_exits_1(capsys):
    assert main(["conformance", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "the parity column diverges from JAX (conformance; the raw DTensor column is " \
           "informational)" in out


def test_docs_cli_md_is_generated_from_the_parser_and_current():
    from conformance.docs import cli_md as cli_docs

    assert cli_docs.main(["--check"]) == 0, "run: python -m conformance.docs.cli_md"
    text = cli_docs.DOC.read_text()
    for flag in ("--skip-without-gpu", "--out-dir", "--strict", "--source"):
        assert f"`{flag}`" in text
    assert "130  interrupted" in text and "3    --device cuda" in text


def test_python_dash_m_parity_is_the_console_script():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "parity", "conformance", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--out-dir" in proc.stdout, proc.stderr


@pytest.mark.parametrize("flag", ["--json", "--md", "--html"])
def test_compare_refuses_an_output_that_is_a_directory_before_reading(flag, tmp_path, capsys):
    a = tmp_path / "a.json"
    a.write_text(json.dumps(_report("jax", "x")))
    assert main(["compare", str(a), str(a), flag, str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{flag} {str(tmp_path)!r} is a directory" in err and len(err.splitlines()) == 1
