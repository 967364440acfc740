"""The compiled column: what it claims, and how its verdicts read beside eager's.

``parity run --backend torch --compile`` (``conformance.running.run_compiled``) runs
each case's op inside ``torch.compile`` under ``jax_semantics()``. This
module holds what the reports and comparisons need of that column without
importing torch: the header it writes (``compile_header``), the error
category of a case that failed to compile (``COMPILE_CATEGORY``), and the
cross comparison of two comparisons against the same reference -- the
compiled column's verdicts beside the eager parity column's
(``compiled_vs_eager``).

A compile error is not an op error: the case never ran compiled, so it says
nothing about the op's semantics, only that ``torch.compile`` could not
build it (a graph break under ``fullgraph=True``, a backend failure, no
graph at all). Its record is ``{"category": "compile", "stage": "compile",
"type": ..., "message": ...}`` and ``parity compare`` gives it the verdict
``compile-error``. An op that rejects its operands while dynamo traces it
(a ``parity.ParityError`` under dynamo's wrapper) is an op error with the
parity error's own category, as in the eager column.
"""

from __future__ import annotations

import json
from typing import Any

from conformance.records.entries import Comparison

COMPILE_CATEGORY = "compile"
COLUMN = "torch-compiled"
BACKENDS = ("aot_eager", "eager")  # CPU-cheap dynamo backends; aot_eager traces the backward too
DEFAULT_BACKEND = "aot_eager"

_TANGENTS = ("; the backward is torch.autograd.backward([loss, *outputs], [ones, *zeros_like("
             "outputs)]): over simulated ranks autograd's own zero tangents for the returned "
             "outputs are LocalTensors, which AOTAutograd refuses")
BACKWARD_NOTE = {
    "aot_eager": ("loss.backward() runs AOTAutograd's backward graph of the compiled "
                  "forward+loss (traced at compile time, not eager autograd)" + _TANGENTS),
    "eager": ("loss.backward() runs eager autograd through the graph dynamo captured "
              "(backend 'eager' builds no backward graph)" + _TANGENTS),
}


def compile_header(backend: str) -> dict[str, Any]:
    """The report header's ``"compile"`` field for ``backend``.

    Raises ``ValueError`` naming the backend when it is not one of ``BACKENDS``.
    """
    if backend not in BACKENDS:
        raise ValueError(f"compile backend {backend!r} is not one of {list(BACKENDS)}")
    return {
        "backend": backend,
        "fullgraph": True,
        "dynamic": False,
        "scope": ("the op and the loss sum(outputs) in one torch.compile(fullgraph=True) "
                  "function, called inside jax_semantics(); inputs are distributed eagerly "
                  "before it"),
        "backward": BACKWARD_NOTE[backend],
        "cache": "torch._dynamo.reset() before every case: no graph is shared between cases",
        "fallback": "none: a case that does not compile is recorded as a compile error",
    }


def compiled_vs_eager(eager: Comparison, compiled: Comparison) -> dict[str, Any]:
    """Per case, the compiled column's verdict against the eager column's
    (both ``parity.comparison/1`` against the same reference).

    Returns ``{"eager_column", "compiled_column", "same", "differs",
    "compile_errors", "cases"}``: ``cases`` lists every case whose verdict
    differs (or is in one comparison only), with both verdicts and the
    compiled column's reason. Raises ``ValueError`` when the two were made
    against references of different columns.
    """
    ref_e, ref_c = eager.get("reference") or {}, compiled.get("reference") or {}
    if ref_e.get("column") != ref_c.get("column"):
        raise ValueError(f"the eager comparison's reference is {ref_e.get('column')!r} and the "
                         f"compiled one's {ref_c.get('column')!r}: compare both against the "
                         "same reference report")
    by_id = {c["id"]: c for c in eager.get("cases", [])}
    rows, same = [], 0
    for case in compiled.get("cases", []):
        before = by_id.pop(case["id"], None)
        if before is not None and before["verdict"] == case["verdict"]:
            same += 1
            continue
        rows.append({"id": case["id"], "op": case.get("op"),
                     "eager": before["verdict"] if before else "missing",
                     "compiled": case["verdict"], "reason": case.get("reason", ""),
                     "eager_reason": before.get("reason", "") if before else ""})
    rows += [{"id": c["id"], "op": c.get("op"), "eager": c["verdict"], "compiled": "missing",
              "reason": "not in the compiled report", "eager_reason": c.get("reason", "")}
             for c in by_id.values()]
    return {"eager_column": (eager.get("candidate") or {}).get("column"),
            "compiled_column": (compiled.get("candidate") or {}).get("column"),
            "compile": (compiled.get("candidate") or {}).get("compile"),
            "same": same, "differs": len(rows),
            "compile_errors": compiled["summary"].get("compile-error", 0),
            "cases": rows}


def to_markdown(cross: dict[str, Any]) -> str:
    """The cross comparison as a Markdown section (a count, then the cases)."""
    comp = cross.get("compile") or {}
    lines = ["## Compiled column beside eager", "",
             f"`{cross['compiled_column']}` (torch.compile backend "
             f"`{comp.get('backend')}`, fullgraph={comp.get('fullgraph')}) against "
             f"`{cross['eager_column']}`: {cross['same']} cases with the same verdict, "
             f"**{cross['differs']} with another verdict** ({cross['compile_errors']} compile "
             "errors).", ""]
    if cross["cases"]:
        lines += ["| case | eager | compiled | reason (compiled) |", "|---|---|---|---|"]
        lines += [f"| `{r['id']}` | {r['eager']} | {r['compiled']} | "
                  f"{_cell(r['reason'])} |" for r in cross["cases"]]
        lines.append("")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")[:300]


DOC_BEGIN = "<!-- begin generated: compiled column (python -m conformance.docs.case_format) -->"
DOC_END = "<!-- end generated: compiled column -->"


def render_doc_section() -> str:
    """The compiled column's part of ``docs/reports.md`` (between ``DOC_BEGIN``
    and ``DOC_END``), from ``compile_header`` and this module's constants, so
    the documented header and records cannot drift from what ``parity run
    --compile`` writes. ``python -m conformance.docs.case_format`` writes it."""
    lines = [DOC_BEGIN, "",
             f"Column `{COLUMN}`; the header's `\"compile\"` field, per `--compile-backend` "
             f"(default `{DEFAULT_BACKEND}`):", "",
             "| key | " + " | ".join(f"`{b}`" for b in BACKENDS) + " |",
             "|---|" + "---|" * len(BACKENDS)]
    headers = [compile_header(b) for b in BACKENDS]
    for key in headers[0]:
        lines.append(f"| `{key}` | " + " | ".join(_cell(json_text(h[key])) for h in headers) + " |")
    lines += ["",
              "Each case that compiled adds `\"compile\": {\"graphs\", \"graph_ops\", \"seconds\"}` "
              "(graphs dynamo handed to the backend, their call nodes, the compiled call's "
              "seconds). A case that did not compile has `\"status\": \"error\"` and "
              f"`\"error\": {{\"category\": \"{COMPILE_CATEGORY}\", \"stage\", \"type\", "
              "\"message\", \"cause\"}`: `stage` is `compile` (the compiled call: a graph break "
              "under fullgraph, a backend failure, or `NoGraph` when no graph was built) or "
              "`backward` (the compiled backward), `type` the compiler's exception, `cause` the "
              "innermost exception it wraps. An op error raised while dynamo traced (a "
              "`parity.ParityError`, or a DTensor message `conformance.running.errors` knows) keeps its "
              "own category and adds `wrapped_in`: the dynamo exception that carried it.", "",
              "`parity compare` gives a compile error the verdict `compile-error` (it does not "
              "hold). With `--eager EAGER.json` (the eager parity report) the comparison JSON "
              "gets `\"compiled_vs_eager\": {\"eager_column\", \"compiled_column\", \"compile\", "
              "\"same\", \"differs\", \"compile_errors\", \"cases\"}`, `cases` listing each case "
              "whose compiled verdict differs from the eager one (`id`, `op`, `eager`, "
              "`compiled`, `reason`, `eager_reason`); the Markdown and the HTML tab show it.",
              "", DOC_END]
    return "\n".join(lines)


def json_text(value: Any) -> str:
    """A header value as the JSON it is written as (strings bare)."""
    return value if isinstance(value, str) else json.dumps(value)
