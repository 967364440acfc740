"""``parity run --backend torch --compile``: the compiled column, end to end
on catalogue cases (add with its gradient, matmul, and bincount, whose
data-dependent output size dynamo cannot compile under fullgraph=True), and
how a failure under torch.compile is sorted into a compile error or an op
error."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import parity
from conformance.cases import default_cases, select
from conformance.reports.report import load_report

IDS = ("add/8/div/x,_|_,x", "matmul/8/div/x,_|_,x", "bincount/8/div/_",
       "sum/2x4/div/data,model/axis=1;keepdims=true")
OPS = ["add", "matmul", "bincount", "sum"]


def parity_cli(*args):
    return subprocess.run([sys.executable, "-m", "conformance.cli", *args],
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The three catalogue cases on JAX, eager parity and compiled parity,
    and `parity compare --eager` of them."""
    d = tmp_path_factory.mktemp("compiled")
    cases = sorted((c for c in select(default_cases(OPS), OPS, None, None, None) if c.id in IDS),
                   key=lambda c: IDS.index(c.id))
    assert [c.id for c in cases] == list(IDS)
    assert cases[0].grad and not cases[1].grad  # the add case checks its gradient
    (d / "cases.json").write_text(json.dumps({"cases": [c.to_json() for c in cases]}))
    procs = [subprocess.Popen(
        [sys.executable, "-m", "conformance.cli", "run", *extra, "--cases", str(d / "cases.json"),
         "--out", str(d / f"{name}.json"), "--quiet", "--timeout", "300"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for name, extra in (("jax", ["--backend", "jax"]), ("torch", ["--backend", "torch"]),
                            ("compiled", ["--backend", "torch", "--compile"]))]
    outs = []
    for proc in procs:
        out, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, out
        outs.append(out)
    (d / "compiled.out").write_text(outs[-1])
    compare = parity_cli("compare", str(d / "jax.json"), str(d / "compiled.json"), "--eager",
                         str(d / "torch.json"), "--json", str(d / "c.json"), "--md",
                         str(d / "c.md"), "--html", str(d / "c.html"))
    return d, compare


def _cases(path):
    return {c["id"]: c for c in load_report(path)["cases"]}


def test_the_compiled_report_names_its_column_backend_and_fullgraph(runs):
    d, _ = runs
    report = load_report(d / "compiled.json")
    assert report["column"] == "torch-compiled" and report["semantics"] == "jax_semantics"
    assert report["compile"]["backend"] == "aot_eager"
    assert report["compile"]["fullgraph"] is True
    assert "none" in report["compile"]["fallback"]


def test_add_matmul_and_sum_run_compiled_with_a_graph_and_eager_values(runs):
    d, _ = runs
    compiled, eager = _cases(d / "compiled.json"), _cases(d / "torch.json")
    for cid in (*IDS[:2], IDS[3]):  # the sum's output is read as values, not FakeTensors
        case = compiled[cid]
        assert case["status"] == "ok", case["error"]
        assert case["compile"]["graphs"] >= 1 and case["compile"]["graph_ops"] >= 1
        assert [o["values"] for o in case["outputs"]] == [o["values"] for o in eager[cid]["outputs"]]
        assert [o["spec"] for o in case["outputs"]] == [o["spec"] for o in eager[cid]["outputs"]]
    grads = compiled[IDS[0]]["grads"]
    assert [g["input"] for g in grads] == [0, 1]
    assert [g["spec"] for g in grads] == [g["spec"] for g in eager[IDS[0]]["grads"]]


def test_a_case_that_does_not_compile_is_a_compile_error_not_an_eager_result(runs):
    d, _ = runs
    case = _cases(d / "compiled.json")["bincount/8/div/_"]
    assert case["status"] == "error" and case["outputs"] == []
    assert case["error"]["category"] == "compile" and case["error"]["stage"] == "compile"
    assert "bincount" in case["error"]["message"]
    assert "compile" not in case  # no graph was built: no compile statistics
    assert _cases(d / "torch.json")["bincount/8/div/_"]["status"] == "ok"  # eager runs it
    assert ("4 cases (3 ok, 1 error, 1 of them compile errors (torch.compile backend "
            "aot_eager))") in (d / "compiled.out").read_text()


def test_compare_shows_the_compiled_verdicts_beside_eager_and_lists_the_difference(runs):
    d, compare = runs
    assert compare.returncode == 1, compare.stdout + compare.stderr  # the compile error fails it
    comparison = json.loads((d / "c.json").read_text())
    verdicts = {c["id"]: c["verdict"] for c in comparison["cases"]}
    assert verdicts == {IDS[0]: "match", IDS[1]: "match", IDS[2]: "compile-error",
                        IDS[3]: "match"}
    cross = comparison["compiled_vs_eager"]
    assert (cross["same"], cross["differs"], cross["compile_errors"]) == (3, 1, 1)
    assert cross["cases"][0]["id"] == IDS[2] and cross["cases"][0]["eager"] == "match"
    assert "compiled verdict differs from eager" in compare.stdout
    assert "| `bincount/8/div/_` | match | compile-error |" in (d / "c.md").read_text()
    assert "compiled ≠ eager" in (d / "c.html").read_text()


# How a failure under torch.compile is recorded (in-process, no compile run).

def test_a_dynamo_error_with_no_op_error_inside_is_a_compile_error():
    import torch._dynamo.exc as dynamo_exc

    from conformance.running.run_compiled import compile_failure

    try:
        try:
            raise NotImplementedError("aten.bincount: data-dependent output size")
        except NotImplementedError as inner:
            raise dynamo_exc.Unsupported("graph break: data-dependent output") from inner
    except dynamo_exc.Unsupported as err:
        record = compile_failure(err)
    assert record["category"] == "compile" and record["type"] == "Unsupported"
    assert record["cause"].startswith("NotImplementedError: aten.bincount")


def test_a_parity_error_inside_a_dynamo_error_is_an_op_error_with_its_category():
    import torch._dynamo.exc as dynamo_exc

    from conformance.running.run_compiled import compile_failure, op_error_under_compile

    try:
        try:
            raise parity.IndivisibleError("dim 0 of size 6 does not divide by 8", dim=0,
                                          size=6, axes=("x",), shards=8)
        except parity.IndivisibleError as inner:
            raise dynamo_exc.TorchRuntimeError("while tracing") from inner
    except dynamo_exc.TorchRuntimeError as err:
        assert compile_failure(err) is None
        assert isinstance(op_error_under_compile(err), parity.IndivisibleError)


def test_an_error_raised_outside_the_compiler_is_an_op_error():
    from conformance.running.run_compiled import compile_failure

    try:
        raise RuntimeError("a DTensor op failed at run time")
    except RuntimeError as err:
        assert compile_failure(err) is None


def test_a_compiled_graph_whose_higher_order_op_no_mode_can_run_is_a_compile_error():
    # AOTAutograd wraps linalg's error checks in with_effects; simulated
    # ranks' LocalTensorMode has no rule for it (cholesky, inv, solve).
    from conformance.running.run_compiled import compile_failure

    for err in (NotImplementedError("There was no rule registered for HigherOrderOperator "
                                    "with_effects and mode <LocalTensorMode>."),
                TypeError("no implementation found for 'torch.ops.higher_order.with_effects' "
                          "on types that implement __torch_function__: [] nor in mode <M>")):
        try:
            raise err
        except (NotImplementedError, TypeError) as raised:
            record = compile_failure(raised)
        assert record["category"] == "compile", record


def test_a_type_error_of_an_op_is_still_an_op_error():
    from conformance.running.run_compiled import compile_failure

    try:
        raise TypeError("no implementation found for 'torch.ops.aten.add' on types [T]")
    except TypeError as err:
        assert compile_failure(err) is None


def test_conformance_with_compile_adds_the_compiled_column_beside_eager(tmp_path):
    out = tmp_path / "reports"
    proc = parity_cli("conformance", "--compile", "--op", "add", "-k", "/8/div/x,_|_,x",
                      "--out-dir", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["columns"]["parity compiled"]["match"] == 1
    assert summary["compiled_vs_eager"]["differs"] == 0
    assert summary["compiled_vs_eager"]["compile"]["backend"] == "aot_eager"
    assert load_report(out / "torch-compiled.json")["column"] == "torch-compiled"
    assert "## Compiled column beside eager" in (out / "compiled-vs-jax.md").read_text()
    assert 'data-col="parity compiled"' in (out / "report.html").read_text()
