"""A comparison's outputs: its JSON, Markdown and HTML files, its tab name,
and the verdict table printed on the terminal (``parity compare`` and
``parity conformance``)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from conformance.records.entries import Comparison
from conformance.reports.compare import VERDICTS, to_markdown
from conformance.reports.html import write_html


def write_text(path: str | Path | None, text: str) -> None:
    """Write ``text`` to ``path`` (its folder created); nothing when ``path`` is None."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)


def write_comparison(comparison: Comparison, json_path: str | Path | None = None,
                     md_path: str | Path | None = None, html_path: str | Path | None = None,
                     title: str | None = None) -> None:
    """Write ``comparison`` as JSON, Markdown and/or a one-tab HTML page."""
    write_text(json_path, json.dumps(comparison, indent=1))
    if md_path:
        write_text(md_path, to_markdown(comparison, title or "parity comparison"))
    if html_path:
        write_html({title or candidate_label(comparison): comparison}, html_path)


def candidate_label(comparison: Comparison) -> str:
    """The tab name of a comparison: ``parity``, ``raw DTensor``, or the column."""
    cand = comparison.get("candidate") or {}
    if cand.get("semantics") == "jax_semantics" and cand.get("compile"):
        return "parity compiled"
    if cand.get("semantics") == "jax_semantics":
        return "parity"
    if cand.get("semantics") == "raw-dtensor":
        return "raw DTensor"
    return str(cand.get("column") or cand.get("backend") or "candidate")


def print_summary(columns: dict[str, Comparison]) -> None:
    """A rich table: one row per verdict, one column per comparison."""
    table = Table(title="verdicts against JAX")
    table.add_column("verdict")
    for name in columns:
        table.add_column(name, justify="right")
    for v in VERDICTS:
        table.add_row(v, *[str(c["summary"][v]) for c in columns.values()])
    table.add_row("[bold]total", *[str(c["total"]) for c in columns.values()])
    table.add_row("chosen-placement notes",
                  *[str(c["chosen_placement_notes"]) for c in columns.values()])
    if any(c.get("compiled_vs_eager") for c in columns.values()):
        table.add_row("compiled verdict differs from eager",
                      *[str(c["compiled_vs_eager"]["differs"]) if c.get("compiled_vs_eager")
                        else "" for c in columns.values()])
    console = Console()
    console.print(table)
    for c in columns.values():
        cross = c.get("compiled_vs_eager")
        for row in (cross or {}).get("cases", [])[:20]:
            console.print(f"  {row['id']}: eager {row['eager']} -> compiled {row['compiled']}: "
                          f"{row['reason'][:160]}", markup=False, highlight=False)
        if cross and cross["differs"] > 20:
            console.print(f"  ... {cross['differs'] - 20} more (the comparison's JSON / "
                          "Markdown list them all)")
