"""``parity conformance``: the catalogue on JAX, torch (parity) and torch
``--raw``, each in its own ``parity run`` process (run side by side), then
both torch columns compared against JAX; ``reports/`` gets the JSON reports,
the comparisons (JSON, Markdown, one HTML page) and a summary table.

``--compile`` adds a fourth column, ``torch-compiled`` (``parity run
--compile``: every op inside ``torch.compile`` under ``jax_semantics()``),
compared against JAX and beside the eager parity column
(``compiled-vs-jax.{json,md}``, a tab of ``report.html``, and in
``summary.json`` the count of cases whose compiled verdict differs from the
eager one). Without it the suite runs the three columns only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

from conformance.commands.arguments import Selection, check_writable_dir, load_selected_cases
from conformance.records.entries import Comparison
from conformance.reports.compare import HOLDS, compare_reports
from conformance.reports.compiled import compiled_vs_eager
from conformance.reports.html import write_html
from conformance.reports.report import load_report
from conformance.reports.summary import print_summary, write_comparison

PROGRESS_EVERY_S = float(os.environ.get("PARITY_PROGRESS_EVERY_S", "30"))
COLUMNS = {  # name -> (report file, parity run arguments)
    "jax": ("jax.json", ["--backend", "jax"]),
    "torch": ("torch.json", ["--backend", "torch"]),
    "torch-raw": ("torch-raw.json", ["--backend", "torch", "--raw"]),
}
COMPILED = "torch-compiled"


def columns_for(args: argparse.Namespace) -> dict[str, tuple[str, list[str]]]:
    """The columns a suite run makes: ``COLUMNS``, plus the compiled column
    with ``--compile`` (its dynamo backend from ``--compile-backend``)."""
    if not getattr(args, "compile", False):
        return dict(COLUMNS)
    return {**COLUMNS, COMPILED: (f"{COMPILED}.json", [
        "--backend", "torch", "--compile", "--compile-backend", args.compile_backend])}


def _journal_count(path: Path) -> int:
    partial = Path(str(path) + ".partial")
    try:
        if partial.exists():
            with open(partial, "rb") as f:  # the header and header updates are no cases
                return max(0, sum(1 for line in f if b'"header_update"' not in line) - 1)
        if path.exists():
            return -1  # finished
    except OSError:
        pass
    return 0


def run_suite(args: argparse.Namespace) -> int:
    """``parity conformance``; SIGTERM stops it like Ctrl-C (exit 130)."""

    def on_term(signum, frame):  # SIGTERM: stop like Ctrl-C
        raise KeyboardInterrupt

    old_term = signal.signal(signal.SIGTERM, on_term)
    try:
        return _run_suite(args)
    except KeyboardInterrupt:  # before the three runs started: nothing to keep
        print("parity conformance: interrupted before any case ran", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, old_term)


def _run_suite(args: argparse.Namespace) -> int:
    out_dir = Path(args.out_dir)
    check_writable_dir(args.out_dir, "--out-dir")
    selection = Selection.from_args(args)
    total = len(load_selected_cases(selection))
    console = Console(stderr=True)
    started = time.monotonic()
    procs = {}
    columns = columns_for(args)
    for name, (fname, extra) in columns.items():
        path = out_dir / fname
        path.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "conformance.cli", "run", *extra, "--out", str(path),
               "--quiet", *selection.to_argv()]
        procs[name] = (subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True), path)
    interrupted = False
    try:
        _watch(procs, total, console)
    except KeyboardInterrupt:
        interrupted = True
        console.print(f"[yellow]interrupted: stopping the {len(procs)} runs; what finished is kept")
        for proc, _ in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # parity run writes its report, exits 130
        for proc, _ in procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    failed = False
    for name, (proc, path) in procs.items():
        output = proc.stdout.read().strip()
        console.print(f"[bold]{name}[/]: {output.splitlines()[-1] if output else ''}")
        if proc.returncode != 0 and not (interrupted and proc.returncode in (130, -2)):
            failed = True
            console.print(f"[red]parity run for {name} exited with {proc.returncode}[/]\n{output[-3000:]}")
    wall = time.monotonic() - started
    if failed and not all(Path(str(p) + ".partial").exists() or p.exists() for _, p in procs.values()):
        return 2
    ref = load_report(out_dir / COLUMNS["jax"][0])
    comparisons = {}
    for name, label in (("torch", "parity"), ("torch-raw", "raw DTensor")):  # parity tab first
        comparison = compare_reports(ref, load_report(out_dir / COLUMNS[name][0]))
        comparison["interrupted"] = interrupted
        stem = "raw-vs-jax" if name == "torch-raw" else "parity-vs-jax"
        write_comparison(comparison, out_dir / f"{stem}.json", out_dir / f"{stem}.md",
                         title=f"{label} against JAX")
        comparisons[label] = comparison
    if COMPILED in columns:
        comparisons["parity compiled"] = _compiled_comparison(
            ref, out_dir / columns[COMPILED][0], comparisons["parity"], out_dir, interrupted)
    write_html(comparisons, out_dir / "report.html")
    cpu = {name: load_report(path).get("worker_cpu_seconds") for name, (_, path) in procs.items()}
    summary = {"wall_seconds": round(wall, 1), "cases": total, "worker_cpu_seconds": cpu,
               "columns": {k: v["summary"] for k, v in comparisons.items()},
               "chosen_placement_notes": {k: v["chosen_placement_notes"] for k, v in comparisons.items()}}
    if COMPILED in columns:
        cross = comparisons["parity compiled"]["compiled_vs_eager"]
        summary["compiled_vs_eager"] = {k: cross[k] for k in ("compile", "same", "differs",
                                                              "compile_errors")}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    print_summary(comparisons)
    Console().print(f"{total} cases per column; wall time {wall:.0f} s (worker CPU s: "
                    + ", ".join(f"{k} {v}" for k, v in cpu.items()) + f"); reports in {out_dir}/ "
                    f"(report.html, parity-vs-jax.md, raw-vs-jax.md"
                    + (", compiled-vs-jax.md" if COMPILED in columns else "") + ")")
    if interrupted:
        console.print(f"[yellow]interrupted after {wall:.0f} s: the reports, comparisons and "
                      f"report.html in {out_dir}/ hold the cases that finished")
    diverged = diverging_cases(comparisons["parity"])
    if diverged and not interrupted:
        console.print(f"[red]parity diverges from JAX in {diverged} cases "
                      f"(parity-vs-jax.md lists them): exit 1")
    return exit_status(comparisons, failed=failed, interrupted=interrupted)


def diverging_cases(comparison: Comparison) -> int:
    """How many cases of ``comparison`` have a verdict outside ``HOLDS``."""
    return sum(n for verdict, n in comparison["summary"].items() if verdict not in HOLDS)


def exit_status(comparisons: dict[str, Comparison], *, failed: bool,
                interrupted: bool) -> int:
    """The suite's exit status: 130 interrupted; 1 when the parity column
    diverges from JAX (a verdict other than match / both-reject) or a
    column's run failed; else 0. The raw DTensor (and compiled) columns are
    informational: their verdicts never change the status."""
    if interrupted:
        return 130
    if not comparisons["parity"]["ok"] or failed:
        return 1
    return 0


def _compiled_comparison(ref: dict, path: Path, eager: dict, out_dir: Path,
                         interrupted: bool) -> dict:
    """The compiled column against JAX, with ``compiled_vs_eager`` (beside
    the eager parity comparison ``eager``); written as compiled-vs-jax.*."""
    comparison = compare_reports(ref, load_report(path))
    comparison["interrupted"] = interrupted
    comparison["compiled_vs_eager"] = compiled_vs_eager(eager, comparison)
    write_comparison(comparison, out_dir / "compiled-vs-jax.json", out_dir / "compiled-vs-jax.md",
                     title="parity compiled against JAX")
    return comparison


def _watch(procs: dict, total: int, console) -> None:
    """Wait for the three runs: a progress bar with ETA on a terminal, else
    one line every ``PROGRESS_EVERY_S`` seconds (done/total, elapsed, ETA)."""
    started = last_line = time.monotonic()
    with Progress(TextColumn("[bold]{task.description:10}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False,
                  disable=not console.is_terminal) as bar:
        tasks = {name: bar.add_task(name, total=total) for name in procs}
        while any(p.poll() is None for p, _ in procs.values()):
            done = {}
            for name, (proc, path) in procs.items():
                n = _journal_count(path)
                done[name] = total if n < 0 or proc.poll() is not None else n
                bar.update(tasks[name], completed=done[name])
            now = time.monotonic()
            if not console.is_terminal and now - last_line >= PROGRESS_EVERY_S:
                last_line = now
                print(progress_line(done, total, now - started), file=sys.stderr, flush=True)
            time.sleep(0.5)
        for name in procs:
            bar.update(tasks[name], completed=total)


def progress_line(done: dict[str, int], total: int, elapsed: float) -> str:
    """``conformance: jax 400/1686, torch 350/1686, ... ; 120 s elapsed, ETA 460 s``
    (the ETA of the slowest column at its rate so far)."""
    slowest = min(done.values()) if done else 0
    eta = "ETA unknown" if slowest == 0 else f"ETA {elapsed * (total - slowest) / slowest:.0f} s"
    cols = ", ".join(f"{name} {n}/{total}" for name, n in done.items())
    return f"conformance: {cols}; {elapsed:.0f} s elapsed, {eta}"
