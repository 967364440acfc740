"""Argument parsing for the ``parity`` console script (``parity.cli`` calls ``main``).

    parity run --backend {jax,torch} [--raw | --compile [--compile-backend B]]
               [--cases FILE ...] [--mesh 2x4] [--device cpu|cuda] --out R.json
    parity compare REF.json CAND.json [--eager EAGER.json] [--json C.json] [--md C.md]
                   [--html C.html]
    parity conformance [--out-dir reports] [--compile]
    parity ops

Bad arguments (a malformed case file, ``--limit 0``, a selection that
matches nothing, ``--mesh 2by4``, a negative ``--timeout``, an unwritable
``--out``) print one line naming the value and exit 2 (``UsageError``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from conformance.catalogue import OPS
from conformance.commands.arguments import Selection, UsageError, check_writable, load_selected_cases
from conformance.commands.suite import run_suite
from conformance.reports import compare, diff
from conformance.reports.compiled import BACKENDS, DEFAULT_BACKEND, compiled_vs_eager
from conformance.reports.html import write_html
from conformance.reports.report import load_json, load_report
from conformance.reports.summary import candidate_label, print_summary, write_comparison, write_text
from conformance.running.multiprocess import run_under_torchrun
from conformance.running.runner import run_cases

EXIT_OK, EXIT_DIVERGES, EXIT_USAGE, EXIT_NO_DEVICE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_CODES = f"""exit status:
  {EXIT_OK}    every case ran (run); parity holds for every case (compare, conformance)
  {EXIT_DIVERGES}    a case does not hold (compare), the parity column diverges from JAX
       (conformance; the raw DTensor column is informational), a semantics diff
       regressed, or a column's run failed (conformance)
  {EXIT_USAGE}    bad arguments: a malformed case file, an empty selection, an unreadable
       file, an --out that is a directory or lies under a file
  {EXIT_NO_DEVICE}    --device cuda and no CUDA device is visible (nothing written);
       --skip-without-gpu makes this exit 0
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C or SIGTERM); what finished is written, marked interrupted"""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} must be more than 0 seconds")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line (no usage block)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{self.prog}: {message} (--help lists the options)", file=sys.stderr)
        raise SystemExit(2)


def _add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cases", nargs="+", metavar="FILE",
                   help="case files (SPEC format); only these cases run")
    p.add_argument("--mesh", metavar="2x4",
                   help="only cases on this mesh; also the mesh of file cases that give none")
    p.add_argument("--op", action="append", default=[], metavar="NAME",
                   help="only this op (repeatable)")
    p.add_argument("-k", dest="pattern", metavar="TEXT", help="only case ids containing TEXT")
    p.add_argument("--limit", type=_positive_int, metavar="N", help="at most N cases (N >= 1)")
    p.add_argument("--timeout", type=_positive_float, default=60.0, metavar="S",
                   help="per-case time limit in seconds (default 60); a case over it is "
                        "recorded as an error (other, Timeout) and the run goes on")


def _add_compile(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("--compile", action="store_true", help=text)
    p.add_argument("--compile-backend", choices=BACKENDS, default=DEFAULT_BACKEND,
                   help=f"with --compile: the dynamo backend (default {DEFAULT_BACKEND}: "
                        "AOTAutograd traces forward and backward; eager: dynamo's graph only)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="parity", description="parity: JAX's sharding semantics for PyTorch DTensor, "
                                   "checked op by op (see docs/reports.md)",
        epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    common = {"epilog": EXIT_CODES, "formatter_class": argparse.RawDescriptionHelpFormatter}

    run = sub.add_parser("run", help="run cases on one backend, write a semantics report",
                         description="Run cases (the default catalogue, or --cases files) on "
                                     "one backend and write its semantics report.", **common)
    run.add_argument("--backend", choices=("jax", "torch"), required=True,
                     help="jax: the reference; torch: parity on DTensor (or --raw)")
    run.add_argument("--raw", action="store_true",
                     help="torch only: plain DTensor, no parity layer (what users get today)")
    _add_compile(run, "torch only: the compiled column (conformance/running/run_compiled.py): each op "
                      "and its loss inside torch.compile(fullgraph=True) under jax_semantics(); "
                      "a case that does not compile is a compile error, never run eagerly")
    run.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                     help="where torch runs (the JAX reference runs on CPU); cuda without "
                          f"a visible GPU exits {EXIT_NO_DEVICE}, writing nothing")
    run.add_argument("--skip-without-gpu", action="store_true",
                     help=f"with --device cuda: no GPU is a skip (exit 0, nothing written), "
                          f"not exit {EXIT_NO_DEVICE}")
    run.add_argument("--out", required=True, metavar="R.json",
                     help="the report file, not a directory (R.json.partial while it "
                          "runs; R.json.log: worker output, kept only when there is some)")
    run.add_argument("--quiet", action="store_true",
                     help="no progress (default: a bar on a terminal, else a line every 30 s; "
                          "PARITY_PROGRESS_EVERY_S sets the interval)")
    run.add_argument("--source", choices=("catalogue", "opinfo"), default="catalogue",
                     help="opinfo: PyTorch's OpInfo samples on sharded DTensors against the "
                          "unsharded op, parity and plain-DTensor columns (torch only; "
                          "conformance/opinfo/runner.py)")
    run.add_argument("--full", action="store_true",
                     help="--source opinfo: every layout scheme, up to 12 samples per op")
    _add_selection(run)

    cmp = sub.add_parser("compare", help="compare a candidate report with the reference, or "
                                         "diff two comparisons",
                         description="REF and CAND are semantics reports (parity.report/1): one "
                                     "verdict per case. Two comparisons (parity.comparison/1), "
                                     "or two candidate reports with --reference, give a "
                                     "semantics diff: per case fixed, regressed or placement "
                                     "moved.", **common)
    cmp.add_argument("reference", help="the reference report (JAX), or the older comparison")
    cmp.add_argument("candidate", help="the candidate report, or the newer comparison")
    cmp.add_argument("--reference", dest="diff_reference", metavar="JAX.json",
                     help="diff two candidate reports, each compared with this reference")
    cmp.add_argument("--eager", metavar="EAGER.json",
                     help="CAND is the compiled column (parity run --compile): also compare "
                          "this eager parity report with REF and list the cases whose compiled "
                          "verdict differs from the eager one (compiled_vs_eager in the JSON)")
    cmp.add_argument("--json", metavar="C.json", help="write the comparison (or diff) JSON")
    cmp.add_argument("--md", metavar="C.md", help="write a Markdown summary")
    cmp.add_argument("--html", metavar="C.html", help="write the HTML report")

    conf = sub.add_parser("conformance", help="run jax, torch and torch --raw, compare, summarise",
                          description="The catalogue (or a selection) on the JAX reference, "
                                      "parity and raw DTensor, side by side; comparisons and "
                                      "report.html in --out-dir.", **common)
    conf.add_argument("--out-dir", default="reports", help="where reports go (default reports/)")
    conf.add_argument("--strict", action="store_true",
                      help=f"accepted for older scripts, no effect: the suite always exits "
                           f"{EXIT_DIVERGES} unless every parity case is match or "
                           "both-reject (the raw DTensor column is informational)")
    _add_compile(conf, "add the compiled column (torch-compiled.json, compiled-vs-jax.*): "
                       "parity run --compile beside the other three; slow (dynamo traces "
                       "every case), so off by default")
    _add_selection(conf)

    ops = sub.add_parser("ops", help="list the op catalogue", **common)
    ops.add_argument("--json", action="store_true", help="as JSON")
    return parser


def cmd_run(args) -> int:
    check_writable(args.out, "--out")
    if args.source == "opinfo":
        from conformance.opinfo.runner import cli_run  # imports torch (OpInfo's op_db)

        return cli_run(args)
    if args.raw and args.backend != "torch":
        print("parity run: --raw applies to --backend torch only", file=sys.stderr)
        return 2
    if args.compile and (args.raw or args.backend != "torch"):
        print("parity run: --compile applies to --backend torch without --raw (the parity "
              "column compiled)", file=sys.stderr)
        return 2
    if args.device == "cuda":
        if args.backend == "jax":
            print("parity run: the JAX reference runs on CPU; compare its CPU report with a "
                  "torch report made on cuda", file=sys.stderr)
            return 2
        import torch  # optional framework: only a cuda run needs it here

        if not torch.cuda.is_available():
            if args.skip_without_gpu:
                print("parity run: no CUDA device visible; skipping (--skip-without-gpu, "
                      "nothing written)")
                return EXIT_OK
            print(f"parity run: --device cuda but no CUDA device is visible; nothing written "
                  f"(exit {EXIT_NO_DEVICE}; --skip-without-gpu makes this a skip, exit 0)",
                  file=sys.stderr)
            return EXIT_NO_DEVICE
    cases = load_selected_cases(Selection.from_args(args))
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        if args.compile:
            raise UsageError("--compile runs on simulated ranks only (one process); under "
                             "torchrun it is not implemented")
        return run_under_torchrun(cases, args)
    result = run_cases(cases, args.backend, args.out, raw=args.raw, device=args.device,
                       timeout=args.timeout,
                       progress=None if args.quiet else "bar" if sys.stderr.isatty() else "lines",
                       compile_backend=args.compile_backend if args.compile else None)
    compiled = (f", {result.compile_error} of them compile errors (torch.compile "
                f"backend {args.compile_backend})" if result.compile_error is not None else "")
    print(f"{result.cases} cases ({result.ok} ok, {result.error} error{compiled}) in "
          f"{result.seconds:.1f} s -> {result.report}"
          + (" (interrupted)" if result.interrupted else ""))
    return EXIT_INTERRUPTED if result.interrupted else EXIT_OK


def cmd_compare(args) -> int:
    """Verdicts of CAND against REF; or a semantics diff of two comparisons
    (or of two candidate reports, each against ``--reference``)."""
    for flag, path in (("--json", args.json), ("--md", args.md), ("--html", args.html)):
        if path is not None:  # "" too: refused, never taken for "not given"
            check_writable(path, flag)
    try:
        first, second = load_json(args.reference, partial=True), load_json(args.candidate,
                                                                              partial=True)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if first.get("schema") == second.get("schema") == compare.SCHEMA or args.diff_reference:
        if args.diff_reference:
            try:
                ref = load_report(args.diff_reference)
                first = compare.compare_reports(ref, load_report(args.reference))
                second = compare.compare_reports(ref, load_report(args.candidate))
            except ValueError as err:
                raise UsageError(str(err)) from None
        result = diff.diff_comparisons(first, second)
        write_text(args.json, json.dumps(result, indent=1))
        write_text(args.md, diff.to_markdown(result))
        print(diff.summary_line(result))
        return 0 if result["ok"] else 1
    try:
        ref, cand = load_report(args.reference), load_report(args.candidate)
    except ValueError as err:
        raise UsageError(f"{err} (compare takes two reports, or two comparisons "
                         f"({compare.SCHEMA}) for a semantics diff)") from None
    if ref.get("backend") != "jax":
        print(f"parity compare: warning: the reference {args.reference} was made by backend "
              f"{ref.get('backend')!r} ({ref.get('column')}), not the JAX reference; verdicts "
              "say how the two agree, not whether parity holds", file=sys.stderr)
    comparison = compare.compare_reports(ref, cand)
    shared = {c["id"] for c in ref["cases"]} & {c["id"] for c in cand["cases"]}
    if not shared:
        print(f"parity compare: the two reports share no case id ({len(ref['cases'])} and "
              f"{len(cand['cases'])} cases): every case is missing", file=sys.stderr)
    columns = {candidate_label(comparison): comparison}
    if args.eager:
        columns = _with_eager(comparison, ref, args)
    write_comparison(comparison, args.json, args.md, None)
    if args.html:
        write_html(columns, args.html)
    print_summary(columns)
    return 0 if comparison["ok"] else 1


def _with_eager(comparison: dict, ref: dict, args) -> dict[str, dict]:
    """``--eager``: the eager parity column against the same reference,
    beside the compiled one; adds ``compiled_vs_eager`` to ``comparison``."""
    if not (comparison["candidate"] or {}).get("compile"):
        raise UsageError(f"--eager: the candidate {args.candidate} is not a compiled column "
                         "(its header has no \"compile\"; make it with parity run --compile)")
    try:
        eager_report = load_report(args.eager)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if eager_report.get("compile") or eager_report.get("column") != "torch":
        raise UsageError(f"--eager {args.eager}: column {eager_report.get('column')!r}, not "
                         "the eager parity column 'torch'")
    eager = compare.compare_reports(ref, eager_report)
    comparison["compiled_vs_eager"] = compiled_vs_eager(eager, comparison)
    return {candidate_label(eager): eager, candidate_label(comparison): comparison}


def cmd_ops(args) -> int:
    if args.json:
        print(json.dumps([{"name": o.name, "group": o.group, "jax": o.jax, "torch": o.torch,
                           "tolerance": o.tol, "grad": o.grad} for o in OPS.values()], indent=1))
        return 0
    table = Table(title=f"op catalogue ({len(OPS)} ops)")
    for col in ("op", "group", "JAX", "torch", "tol", "grad"):
        table.add_column(col, overflow="fold")
    for o in OPS.values():  # escape: "[a, b]" in an expression is not rich markup
        table.add_row(*(escape(t) for t in (o.name, o.group, o.jax, o.torch, o.tol)),
                      "yes" if o.grad else "")
    Console(width=max(160, Console().width)).print(table)
    return 0


def cmd_conformance(args) -> int:
    return run_suite(args)


COMMANDS = ("run", "compare", "conformance", "ops")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        # argparse would only say the command is missing, not name the flag
        print(f"parity: {argv[0]!r} comes before a command; the first argument is one of "
              f"{', '.join(COMMANDS)} (--help lists the options)", file=sys.stderr)
        return EXIT_USAGE
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as done:  # --help (0) or a bad argument (2, one line said)
        return int(done.code or 0)
    try:
        return {"run": cmd_run, "compare": cmd_compare, "conformance": cmd_conformance,
                "ops": cmd_ops}[args.command](args)
    except UsageError as err:
        print(f"parity {args.command}: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
