"""The compiled column in comparisons, Markdown, HTML and the suite, on
hand-made reports (no torch.compile runs here; tests/test_conformance_compile.py
runs it)."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from conformance.commands.suite import COMPILED, COLUMNS, columns_for
from conformance.records.values import encode
from conformance.reports.compare import VERDICTS, compare_reports, to_markdown, verdict_of
from conformance.reports.compiled import COMPILE_CATEGORY, compile_header, compiled_vs_eager
from conformance.reports.html import write_html
from parity.cli import main
from test_conformance_html import _dom, needs_chromium

import numpy as np

VALUES = encode(np.arange(4, dtype=np.float32))


def _ok():
    return {"status": "ok", "error": None, "grads": [], "tolerance": {"rtol": 0, "atol": 0},
            "outputs": [{"shape": [4], "dtype": "float32", "spec": [[]], "rule": "typed",
                         "shards": {"0": [[0, 4]]}, "pending": [], "values": VALUES}]}


def _compile_error():
    return {"status": "error", "outputs": [], "grads": [],
            "error": {"category": COMPILE_CATEGORY, "stage": "compile", "type": "Unsupported",
                      "message": "Dynamo failed to run FX node with fake tensors: bincount",
                      "cause": "DynamicOutputShapeException: aten.bincount.default"}}


def _report(column, entries, compile_backend=None):
    header = {"schema": "parity.report/1", "backend": "jax" if column == "jax" else "torch",
              "column": column, "device": "cpu", "mode": "simulated",
              "semantics": None if column == "jax" else "jax_semantics"}
    if compile_backend:
        header["compile"] = compile_header(compile_backend)
    case = {"mesh": {"shape": [4], "axis_names": ["x"]}, "kwargs": {}, "grad": False,
            "inputs": [{"shape": [4], "dtype": "float32", "layout": [None]}]}
    return {**header, "cases": [{"id": i, "op": i.split("/")[0], **case, **e}
                                for i, e in entries.items()]}


def _three_columns():
    ref = _report("jax", {"add/a": _ok(), "bincount/b": _ok(), "neg/c": _ok()})
    eager = _report("torch", {"add/a": _ok(), "bincount/b": _ok(), "neg/c": _ok()})
    wrong = _ok()
    wrong["outputs"] = [{**wrong["outputs"][0],
                         "values": encode(np.arange(4, dtype=np.float32) + 1)}]
    compiled = _report("torch-compiled", {"add/a": _ok(), "bincount/b": _compile_error(),
                                          "neg/c": wrong}, compile_backend="aot_eager")
    return ref, eager, compiled


def test_a_case_that_did_not_compile_gets_the_compile_error_verdict():
    v = verdict_of(_ok(), _compile_error())
    assert v["verdict"] == "compile-error"
    assert "did not compile" in v["reason"] and "Unsupported" in v["reason"]
    assert "DynamicOutputShapeException" in v["reason"]


def test_a_compile_error_counts_apart_from_op_errors_and_fails_the_comparison():
    ref, _, compiled = _three_columns()
    comp = compare_reports(ref, compiled)
    assert comp["summary"]["compile-error"] == 1 and comp["summary"]["error-differs"] == 0
    assert comp["candidate"]["compile"]["backend"] == "aot_eager"
    assert not comp["ok"]
    assert "compile-error" in VERDICTS


def test_compiled_vs_eager_lists_each_case_whose_verdict_differs_with_the_reason():
    ref, eager, compiled = _three_columns()
    cross = compiled_vs_eager(compare_reports(ref, eager), compare_reports(ref, compiled))
    assert (cross["same"], cross["differs"], cross["compile_errors"]) == (1, 2, 1)
    rows = {r["id"]: r for r in cross["cases"]}
    assert rows["bincount/b"]["eager"] == "match"
    assert rows["bincount/b"]["compiled"] == "compile-error"
    assert rows["neg/c"]["compiled"] == "values-differ"
    assert "4 of 4 elements differ" in rows["neg/c"]["reason"]
    assert cross["compile"]["fullgraph"] is True


def test_compiled_vs_eager_lists_a_case_the_compiled_report_lacks():
    ref, eager, compiled = _three_columns()
    compiled["cases"] = compiled["cases"][:1]
    cross = compiled_vs_eager(compare_reports(ref, eager), compare_reports(ref, compiled))
    assert {r["id"]: r["compiled"] for r in cross["cases"]}["neg/c"] == "missing"


def test_compiled_vs_eager_refuses_comparisons_against_different_references():
    ref, eager, compiled = _three_columns()
    other_ref = _report("torch-raw", {"add/a": _ok()})
    with pytest.raises(ValueError, match="same reference report"):
        compiled_vs_eager(compare_reports(ref, eager), compare_reports(other_ref, compiled))


def test_compile_header_names_the_backend_and_refuses_an_unknown_one():
    assert compile_header("eager")["backend"] == "eager"
    assert "AOTAutograd" in compile_header("aot_eager")["backward"]
    with pytest.raises(ValueError, match="'inductor' is not one of"):
        compile_header("inductor")


def test_markdown_of_a_compiled_comparison_shows_the_backend_and_the_differences():
    ref, eager, compiled = _three_columns()
    comp = compare_reports(ref, compiled)
    comp["compiled_vs_eager"] = compiled_vs_eager(compare_reports(ref, eager), comp)
    md = to_markdown(comp)
    assert "torch.compile backend aot_eager, fullgraph=True" in md
    assert "## Compiled column beside eager" in md
    assert "**2 with another verdict** (1 compile errors)" in md
    assert "| `bincount/b` | match | compile-error |" in md


def test_html_page_carries_the_compiled_tab_and_its_differences(tmp_path):
    ref, eager, compiled = _three_columns()
    e, c = compare_reports(ref, eager), compare_reports(ref, compiled)
    c["compiled_vs_eager"] = compiled_vs_eager(e, c)
    html = write_html({"parity": e, "parity compiled": c}, tmp_path / "r.html").read_text()
    data = json.loads(html.split('<script type="application/json" id="data">')[1]
                      .split("</script>")[0])
    assert data["parity"]["cross"] is None
    assert data["parity compiled"]["cross"]["differs"] == 2
    assert data["parity compiled"]["summary"]["compile-error"] == 1
    assert "compiled ≠ eager" in html and "compile-error" in html


def test_compare_with_eager_prints_both_columns_and_the_count_of_differences(tmp_path, capsys):
    ref, eager, compiled = _three_columns()
    paths = {}
    for name, report in (("jax", ref), ("torch", eager), ("compiled", compiled)):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(report))
    out_json = tmp_path / "c.json"
    code = main(["compare", str(paths["jax"]), str(paths["compiled"]), "--eager",
                 str(paths["torch"]), "--json", str(out_json), "--html", str(tmp_path / "c.html")])
    assert code == 1  # a compile error and a values-differ do not hold
    out = capsys.readouterr().out
    assert "parity compiled" in out and "compiled verdict differs from eager" in out
    assert "bincount/b: eager match -> compiled compile-error" in out
    assert json.loads(out_json.read_text())["compiled_vs_eager"]["differs"] == 2


def test_compare_with_eager_refuses_a_candidate_that_is_not_compiled(tmp_path, capsys):
    ref, eager, _ = _three_columns()
    (tmp_path / "jax.json").write_text(json.dumps(ref))
    (tmp_path / "torch.json").write_text(json.dumps(eager))
    code = main(["compare", str(tmp_path / "jax.json"), str(tmp_path / "torch.json"),
                 "--eager", str(tmp_path / "torch.json")])
    assert code == 2
    assert "is not a compiled column" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--backend", "jax", "--compile"],
                                  ["--backend", "torch", "--raw", "--compile"]])
def test_run_refuses_compile_outside_the_parity_torch_column(argv, tmp_path, capsys):
    assert main(["run", *argv, "--op", "neg", "--out", str(tmp_path / "r.json")]) == 2
    assert "--compile applies to --backend torch without --raw" in capsys.readouterr().err


def test_conformance_adds_the_compiled_column_only_with_compile():
    plain = argparse.Namespace(compile=False, compile_backend="aot_eager")
    assert columns_for(plain) == COLUMNS
    compiled = columns_for(argparse.Namespace(compile=True, compile_backend="eager"))
    assert list(compiled) == [*COLUMNS, COMPILED]
    assert compiled[COMPILED][1] == ["--backend", "torch", "--compile", "--compile-backend", "eager"]


def test_the_reports_doc_has_the_generated_compiled_section_with_every_header_key():
    from conformance.docs import case_format as case_docs
    from conformance.reports.compiled import BACKENDS, render_doc_section

    text = case_docs.REPORTS_DOC.read_text()
    assert render_doc_section() in text  # `python -m conformance.docs.case_format --check` guards it
    for key in compile_header(BACKENDS[0]):
        assert f"| `{key}` |" in render_doc_section()


@needs_chromium
def test_the_compiled_tab_in_a_browser_counts_and_lists_the_cases_that_differ_from_eager(tmp_path):
    ref, eager, compiled = _three_columns()
    e, c = compare_reports(ref, eager), compare_reports(ref, compiled)
    c["compiled_vs_eager"] = compiled_vs_eager(e, c)
    dom = _dom(write_html({"parity": e, "parity compiled": c}, tmp_path / "r.html"),
               "parity%20compiled|bincount%2Fb")
    assert re.search(r'id="cross-count"[^>]*><b>2</b>compiled ≠ eager', dom)
    assert "<th>eager verdict</th>" in dom
    assert "torch.compile backend aot_eager, fullgraph=true" in dom
    assert re.search(r"<h2>bincount/b <span[^>]*>compile-error</span>", dom)
