"""Argument parsing for the ``parity`` console script (``parity.cli`` calls ``main``).

    parity run --backend {jax,torch} [--raw] [--cases FILE ...] [--mesh 2x4]
               [--device cpu|cuda] --out R.json
    parity compare REF.json CAND.json [--json C.json] [--md C.md] [--html C.html]
    parity conformance [--out-dir reports]
    parity ops
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def _add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cases", nargs="+", metavar="FILE",
                   help="case files (SPEC format); only these cases run")
    p.add_argument("--mesh", metavar="2x4",
                   help="only cases on this mesh; also the mesh of file cases that give none")
    p.add_argument("--op", action="append", default=[], metavar="NAME",
                   help="only this op (repeatable)")
    p.add_argument("-k", dest="pattern", metavar="TEXT", help="only case ids containing TEXT")
    p.add_argument("--limit", type=int, help="at most N cases")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="per-case time limit in seconds (default 60)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="parity", description="parity: JAX's sharding semantics for PyTorch DTensor, "
                                   "checked op by op (see docs/reports.md)")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run cases on one backend, write a semantics report")
    run.add_argument("--backend", choices=("jax", "torch"), required=True)
    run.add_argument("--raw", action="store_true",
                     help="torch only: plain DTensor, no parity layer (what users get today)")
    run.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    run.add_argument("--out", required=True, metavar="R.json")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_selection(run)

    cmp = sub.add_parser("compare", help="compare a candidate report with the reference")
    cmp.add_argument("reference")
    cmp.add_argument("candidate")
    cmp.add_argument("--json", metavar="C.json")
    cmp.add_argument("--md", metavar="C.md")
    cmp.add_argument("--html", metavar="C.html")

    conf = sub.add_parser("conformance", help="run jax, torch and torch --raw, compare, summarise")
    conf.add_argument("--out-dir", default="reports")
    conf.add_argument("--strict", action="store_true",
                      help="exit 1 unless every parity case is match or both-reject")
    _add_selection(conf)

    ops = sub.add_parser("ops", help="list the op catalogue")
    ops.add_argument("--json", action="store_true")
    return parser


def load_selected_cases(args) -> list:
    from conformance.cases import DEFAULT_AXIS_NAMES, default_cases, load_case_file, select

    default_mesh = None
    if args.mesh:
        shape = tuple(int(s) for s in args.mesh.lower().split("x"))
        default_mesh = (shape, DEFAULT_AXIS_NAMES.get(len(shape),
                                                      tuple(f"axis{i}" for i in range(len(shape)))))
    if args.cases:
        cases = [c for f in args.cases for c in load_case_file(f, default_mesh)]
        ids = [c.id for c in cases]
        dup = {i for i in ids if ids.count(i) > 1}
        if dup:
            raise SystemExit(f"parity: case ids repeat across files: {sorted(dup)[:5]}")
    else:
        cases = default_cases()
    mesh_tag = "x".join(str(s) for s in default_mesh[0]) if default_mesh else None
    return select(cases, args.op, args.pattern, mesh_tag, args.limit)


def cmd_run(args) -> int:
    from conformance.cases import CaseFileError
    from conformance.runner import run_cases

    if args.raw and args.backend != "torch":
        print("parity run: --raw applies to --backend torch only", file=sys.stderr)
        return 2
    if args.device == "cuda":
        if args.backend == "jax":
            print("parity run: the JAX reference runs on CPU; compare its CPU report with a "
                  "torch report made on cuda", file=sys.stderr)
            return 2
        import torch

        if not torch.cuda.is_available():
            print("parity run: no CUDA device visible; skipping (nothing written)")
            return 0
    try:
        cases = load_selected_cases(args)
    except CaseFileError as err:
        print(f"parity run: {err}", file=sys.stderr)
        return 2
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from conformance.multiprocess import run_under_torchrun

        return run_under_torchrun(cases, args)
    result = run_cases(cases, args.backend, args.out, raw=args.raw, device=args.device,
                       timeout=args.timeout, progress=not args.quiet and sys.stderr.isatty())
    print(f"{result['cases']} cases ({result['ok']} ok, {result['error']} error) in "
          f"{result['seconds']:.1f} s -> {result['report']}"
          + (" (interrupted)" if result["interrupted"] else ""))
    return 130 if result["interrupted"] else 0


def cmd_compare(args) -> int:
    from conformance.compare import compare_reports, to_markdown
    from conformance.report import load_report

    try:
        ref, cand = load_report(args.reference), load_report(args.candidate)
    except ValueError as err:
        print(f"parity compare: {err}", file=sys.stderr)
        return 2
    comparison = compare_reports(ref, cand)
    write_comparison(comparison, args.json, args.md, args.html)
    print_summary({"candidate": comparison})
    return 0 if comparison["ok"] else 1


def write_comparison(comparison: dict, json_path=None, md_path=None, html_path=None,
                     title: str | None = None) -> None:
    from conformance.compare import to_markdown

    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(comparison, indent=1))
    if md_path:
        Path(md_path).parent.mkdir(parents=True, exist_ok=True)
        Path(md_path).write_text(to_markdown(comparison, title or "parity comparison"))
    if html_path:
        from conformance.html import write_html

        write_html({"candidate": comparison} if title is None else {title: comparison}, html_path)


def print_summary(columns: dict[str, dict]) -> None:
    """A rich table: one row per verdict, one column per comparison."""
    from rich.console import Console
    from rich.table import Table

    from conformance.compare import VERDICTS

    table = Table(title="verdicts against JAX")
    table.add_column("verdict")
    for name in columns:
        table.add_column(name, justify="right")
    for v in VERDICTS:
        table.add_row(v, *[str(c["summary"][v]) for c in columns.values()])
    table.add_row("[bold]total", *[str(c["total"]) for c in columns.values()])
    table.add_row("chosen-placement notes",
                  *[str(c["chosen_placement_notes"]) for c in columns.values()])
    Console().print(table)


def cmd_ops(args) -> int:
    from conformance.catalogue import OPS

    if args.json:
        print(json.dumps([{"name": o.name, "group": o.group, "jax": o.jax, "torch": o.torch,
                           "tolerance": o.tol, "grad": o.grad} for o in OPS.values()], indent=1))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"op catalogue ({len(OPS)} ops)")
    for col in ("op", "group", "JAX", "torch", "tol", "grad"):
        table.add_column(col, overflow="fold")
    for o in OPS.values():
        table.add_row(o.name, o.group, o.jax, o.torch, o.tol, "yes" if o.grad else "")
    Console(width=max(160, Console().width)).print(table)
    return 0


def cmd_conformance(args) -> int:
    from conformance.suite import run_suite

    return run_suite(args)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return {"run": cmd_run, "compare": cmd_compare, "conformance": cmd_conformance,
            "ops": cmd_ops}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
