"""The HTML report: one self-contained page (inline CSS, JS and data) from
the jinja2 template ``templates/report.html.j2``.

A matrix of ops against input layouts per mesh, coloured by verdict; filters
by verdict and op; for each case its inputs and both sides' outputs and
gradients drawn as device grids (which slice on which device). A device that
differs is outlined red when the case does not hold, dashed amber when it is
only a note (a chosen, non-normative reference placement). The first tab is
the one it opens on; ``#<tab>|<case id>`` links to a case. A compiled
column's tab (``parity compare --eager``, ``parity conformance --compile``)
also counts the cases whose compiled verdict differs from the eager one;
click the count to list only those, each with its eager verdict.
"""

from __future__ import annotations

import json
from pathlib import Path

import jinja2

from conformance.records.entries import Comparison
from conformance.reports.compare import VERDICTS

COLOURS = {"match": "#3a9d5d", "both-reject": "#8fbf9f", "both-other": "#7a4fa0", "values-differ": "#d64545",
           "placement-differs": "#e8a33d", "grads-differ": "#b565c7",
           "error-differs": "#d9713a", "compile-error": "#4f6d9a", "missing": "#9a9a9a"}


def write_html(comparisons: dict[str, Comparison], path: str | Path) -> Path:
    """Write the page for one or more comparisons (one tab each)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]))
    data = {}
    for name, comp in comparisons.items():
        data[name] = {
            # a comparison made before a verdict existed counts none of it
            "summary": {v: comp["summary"].get(v, 0) for v in VERDICTS}, "total": comp["total"],
            "chosen": comp["chosen_placement_notes"],
            "interrupted": bool(comp.get("interrupted") or comp["reference"].get("interrupted")
                                or comp["candidate"].get("interrupted")),
            "reference": comp["reference"], "candidate": comp["candidate"],
            "cases": [{k: c.get(k) for k in ("id", "op", "verdict", "reason", "notes", "mesh",
                                               "inputs", "kwargs", "grad", "reference", "candidate")}
                      for c in comp["cases"]],
            # the compiled column beside the eager one (parity compare --eager,
            # parity conformance --compile): the cases whose verdict differs
            "cross": comp.get("compiled_vs_eager"),
        }
    html = env.get_template("report.html.j2").render(
        data_json=json.dumps(data, separators=(",", ":")).replace("</", "<\\/"),
        verdicts=VERDICTS, colours=COLOURS, columns=list(comparisons))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html, encoding="utf-8")
    return path
