"""``parity compare REF CAND``: one verdict per case.

| verdict             | when                                                          |
|---------------------|---------------------------------------------------------------|
| ``match``           | same outputs (values within tolerance), same typed placement, same grads |
| ``values-differ``   | an output's shape, dtype or values differ                     |
| ``placement-differs`` | a ``"typed"`` output sits differently (spec, shards, or a pending reduction) |
| ``grads-differ``    | a gradient's values or (typed) placement differ               |
| ``error-differs``   | one side failed, or both failed in different categories       |
| ``both-reject``     | both failed in the same specific category: parity holds       |
| ``both-other``      | both failed with category ``other`` (a malformed case, a crash, a bug): says nothing about parity, fails the run |
| ``compile-error``   | the compiled column could not compile the case (error category ``compile``): says nothing about the op's semantics, fails the run |
| ``missing``         | the case is in only one report                                |

Checked in that order; the first failure is the verdict and its reason
reads like a chex assertion (which output, which index, by how much). A
``"chosen"`` output whose placement differs is a ``match`` with a note.
Integer outputs compare by value when the widths differ (JAX runs with x64
off, so torch's int64 meets JAX's int32); the note says so.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from conformance.records.entries import CaseSide, Comparison, VerdictRow
from conformance.records.values import decode
from conformance.reports.compiled import COMPILE_CATEGORY
from conformance.reports.compiled import to_markdown as cross_markdown

VERDICTS = ("match", "values-differ", "placement-differs", "grads-differ", "error-differs",
            "both-reject", "both-other", "compile-error", "missing")
HOLDS = ("match", "both-reject")  # the verdicts that say parity holds
SCHEMA = "parity.comparison/1"


def _tol(ref: dict, cand: dict, key: str = "tolerance") -> tuple[float, float]:
    r, c = ref.get(key) or {}, cand.get(key) or {}
    return (max(r.get("rtol", 0.0), c.get("rtol", 0.0)), max(r.get("atol", 0.0), c.get("atol", 0.0)))


def compare_values(ref: dict, cand: dict, what: str, rtol: float, atol: float,
                   notes: list[str]) -> str | None:
    """Reason why two recorded arrays differ in shape, dtype or values, or None."""
    if list(ref["shape"]) != list(cand["shape"]):
        return f"{what}: shape {tuple(cand['shape'])} != reference {tuple(ref['shape'])}"
    a, b = decode(ref["values"]), decode(cand["values"])
    if a.shape != b.shape:  # values recorded with another shape than the output's (raw DTensor)
        return (f"{what}: values of shape {b.shape} != reference {a.shape} (recorded shape "
                f"{tuple(cand['shape'])})")
    if a.dtype != b.dtype:
        same_kind = a.dtype.kind == b.dtype.kind and a.dtype.kind in "iu"
        if not same_kind:
            return f"{what}: dtype {b.dtype} != reference {a.dtype}"
        notes.append(f"{what}: dtype {b.dtype} vs reference {a.dtype} (JAX x64 off); values compared")
    if a.size == 0:
        return None
    if a.ndim == 0:  # index arithmetic below wants at least one dim
        a, b = a.reshape(1), b.reshape(1)
    if a.dtype.kind in "biu" or (rtol == 0 and atol == 0):
        bad = a != b if a.dtype.kind in "biu" else ~((a == b) | (np.isnan(a) & np.isnan(b)))
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            return (f"{what}: {int(bad.sum())} of {a.size} elements differ (exact); first at "
                    f"index {idx}: {b[idx].item()!r} != reference {a[idx].item()!r}")
        return None
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    close = np.isclose(b64, a64, rtol=rtol, atol=atol, equal_nan=True)
    if not close.all():
        err = np.abs(b64 - a64)
        err[np.isnan(err)] = np.inf
        idx = tuple(int(i) for i in np.unravel_index(np.argmax(np.where(close, 0, err)), a.shape))
        return (f"{what}: {int((~close).sum())} of {a.size} elements differ beyond rtol={rtol:g} "
                f"atol={atol:g}; worst at index {idx}: {b64[idx]:.7g} != reference "
                f"{a64[idx]:.7g} (|diff| {err[idx]:.3g})")
    return None


def compare_placement(ref: dict, cand: dict, what: str) -> str | None:
    """Reason why a candidate sits differently from a typed reference, or None."""
    if cand.get("pending"):
        return (f"{what}: a pending reduction over mesh axes {cand['pending']} leaks "
                f"(DTensor Partial); the reference holds reduced values")
    if cand.get("spec") is None:
        if cand.get("placements"):
            return (f"{what}: DTensor placements {cand['placements']} that no PartitionSpec "
                    f"describes; reference spec {_spec(ref['spec'])}")
        return f"{what}: not distributed (plain tensor); reference spec {_spec(ref['spec'])}"
    reasons = []
    if ref.get("type") is not None and ref.get("type") != cand.get("type"):
        reasons.append(f"typeof {cand.get('type')} != reference {ref['type']}")
    if [list(n) for n in ref["spec"]] != [list(n) for n in cand["spec"]]:
        reasons.append(f"spec {_spec(cand['spec'])} != reference {_spec(ref['spec'])}")
    rs, cs = ref.get("shards") or {}, cand.get("shards") or {}
    for dev in sorted(set(rs) | set(cs), key=int):
        if rs.get(dev) != cs.get(dev):
            reasons.append(f"device {dev} holds {_bounds(cs.get(dev))} != reference {_bounds(rs.get(dev))}")
            if len(reasons) > 3:
                reasons.append("...")
                break
    return f"{what}: " + "; ".join(reasons) if reasons else None


def _spec(spec) -> str:
    return "(" + ", ".join("+".join(n) if n else "_" for n in spec) + ")"


def _bounds(b) -> str:
    return "none" if b is None else "[" + ", ".join(f"{x}:{y}" for x, y in b) + "]"


def verdict_of(ref: dict | None, cand: dict | None) -> dict[str, Any]:
    """``{"verdict", "reason", "notes"}`` for one case."""
    notes: list[str] = []
    if ref is None or cand is None:
        side = "reference" if ref is None else "candidate"
        return {"verdict": "missing", "reason": f"not in the {side} report", "notes": notes}
    rerr = ref.get("error") if ref.get("status") != "ok" else None
    cerr = cand.get("error") if cand.get("status") != "ok" else None
    for side, err in (("candidate", cerr), ("reference", rerr)):
        if err and err.get("category") == COMPILE_CATEGORY:
            return {"verdict": "compile-error", "notes": notes,
                    "reason": f"the {side} did not compile ({err.get('stage', 'compile')}, "
                              f"{err.get('type')}: {_first_line(err.get('message'))})"
                              + (f"; cause {_first_line(err['cause'])}" if err.get("cause") else "")}
    if rerr or cerr:
        if rerr and cerr:
            if rerr.get("category") == cerr.get("category") == "other":
                return {"verdict": "both-other", "notes": notes,
                        "reason": f"both fail with category other: candidate {cerr.get('type')}: "
                                  f"{_first_line(cerr.get('message'))}; reference "
                                  f"{rerr.get('type')}: {_first_line(rerr.get('message'))}"}
            if rerr.get("category") == cerr.get("category"):
                return {"verdict": "both-reject", "notes": notes,
                        "reason": f"both reject: {rerr.get('category')} ({cerr.get('type')})"}
            return {"verdict": "error-differs", "notes": notes,
                    "reason": f"categories differ: candidate {cerr.get('category')} "
                              f"({cerr.get('type')}) vs reference {rerr.get('category')}"}
        if cerr:
            return {"verdict": "error-differs", "notes": notes,
                    "reason": f"candidate fails ({cerr.get('category')}, {cerr.get('type')}: "
                              f"{_first_line(cerr.get('message'))}); the reference runs"}
        return {"verdict": "error-differs", "notes": notes,
                "reason": f"reference rejects ({rerr.get('category')}, {rerr.get('type')}: "
                          f"{_first_line(rerr.get('message'))}); the candidate runs"}
    rtol, atol = _tol(ref, cand)
    routs, couts = ref.get("outputs", []), cand.get("outputs", [])
    if len(routs) != len(couts):
        return {"verdict": "values-differ", "notes": notes,
                "reason": f"{len(couts)} outputs != reference {len(routs)}"}
    for k, (r, c) in enumerate(zip(routs, couts)):
        reason = compare_values(r, c, f"output {k}", rtol, atol, notes)
        if reason:
            return {"verdict": "values-differ", "reason": reason, "notes": notes}
    for k, (r, c) in enumerate(zip(routs, couts)):
        reason = _placement_check(r, c, f"output {k}", notes)
        if reason:
            return {"verdict": "placement-differs", "reason": reason, "notes": notes}
    rgr, cgr = ref.get("grads", []), cand.get("grads", [])
    grtol, gatol = _tol(ref, cand, "grad_tolerance")
    rmap = {g.get("input", i): g for i, g in enumerate(rgr)}
    cmap = {g.get("input", i): g for i, g in enumerate(cgr)}
    if set(rmap) != set(cmap):
        return {"verdict": "grads-differ", "notes": notes,
                "reason": f"gradients for inputs {sorted(cmap)} != reference {sorted(rmap)}"}
    for i in sorted(rmap):
        what = f"gradient of input {i}"
        reason = compare_values(rmap[i], cmap[i], what, max(grtol, rtol), max(gatol, atol), notes)
        reason = reason or _placement_check(rmap[i], cmap[i], what, notes)
        if reason:
            return {"verdict": "grads-differ", "reason": reason, "notes": notes}
    return {"verdict": "match", "reason": "", "notes": notes}


def _placement_check(r: dict, c: dict, what: str, notes: list[str]) -> str | None:
    if r.get("spec") is None:  # a host operand's gradient: values only
        return None
    reason = compare_placement(r, c, what)
    if reason and r.get("rule") != "typed":
        notes.append(f"chosen placement differs (not normative): {reason}")
        return None
    return reason


def _first_line(text: Any) -> str:
    return str(text or "").strip().splitlines()[0][:200] if text else ""


def compare_reports(ref: dict, cand: dict) -> Comparison:
    """The comparison (``parity.comparison/1``) of two reports."""
    rcases = {c["id"]: c for c in ref.get("cases", [])}
    ccases = {c["id"]: c for c in cand.get("cases", [])}
    order = list(rcases) + [i for i in ccases if i not in rcases]
    results: list[VerdictRow] = []
    for cid in order:
        r, c = rcases.get(cid), ccases.get(cid)
        v = verdict_of(r, c)
        base = r or c
        results.append({"id": cid, "op": base.get("op"), "verdict": v["verdict"],
                        "reason": v["reason"], "notes": v["notes"],
                        "mesh": base.get("mesh"), "inputs": base.get("inputs"),
                        "kwargs": base.get("kwargs"), "grad": base.get("grad"),
                        "reference": _brief(r), "candidate": _brief(c)})
    counts = Counter(x["verdict"] for x in results)
    summary = {v: counts.get(v, 0) for v in VERDICTS}
    chosen_notes = sum(any(n.startswith("chosen placement") for n in x["notes"]) for x in results)
    return {
        "schema": SCHEMA,
        "reference": _header(ref), "candidate": _header(cand),
        "summary": summary, "total": len(results),
        "chosen_placement_notes": chosen_notes,
        "ok": all(x["verdict"] in HOLDS for x in results),
        "cases": results,
    }


def _header(report: dict) -> dict[str, Any]:
    return {k: report.get(k) for k in ("backend", "column", "device", "mode", "versions",
                                        "semantics", "api", "interrupted", "started", "tf32",
                                        "compile")}


def _brief(entry: dict | None) -> CaseSide | None:
    """What the HTML needs of one side: status, error, placements (no values)."""
    if entry is None:
        return None
    keep = ("shape", "dtype", "spec", "shards", "pending", "rule", "type")
    return {"status": entry.get("status"), "error": entry.get("error"),
            "outputs": [{k: o.get(k) for k in keep} for o in entry.get("outputs", [])],
            "grads": [{**{k: g.get(k) for k in keep}, "input": g.get("input")}
                      for g in entry.get("grads", [])],
            "seconds": entry.get("seconds"), "compile": entry.get("compile")}


def to_markdown(comparison: Comparison, title: str = "parity comparison") -> str:
    """A Markdown summary: counts per verdict, then every non-match case."""
    ref, cand = comparison["reference"], comparison["candidate"]
    lines = [f"# {title}", "",
             f"reference: **{ref.get('column') or ref.get('backend')}** ({ref.get('device')}, "
             f"{ref.get('mode')}) — candidate: **{cand.get('column') or cand.get('backend')}** "
             f"({cand.get('device')}, {cand.get('mode')}, semantics: {cand.get('semantics')}"
             + (f", torch.compile backend {cand['compile'].get('backend')}, fullgraph="
                f"{cand['compile'].get('fullgraph')}" if cand.get("compile") else "") + ")", "",
             "| verdict | cases |", "|---|---:|"]
    for v in VERDICTS:
        lines.append(f"| {v} | {comparison['summary'][v]} |")
    lines += [f"| **total** | {comparison['total']} |", "",
              f"Chosen (non-normative) placements that differ: {comparison['chosen_placement_notes']}.",
              ""]
    cases = comparison["cases"]
    groups = (("Cases that do not hold", [c for c in cases if c["verdict"] not in HOLDS]),
              ("Cases both backends reject in the same category (parity holds)",
               [c for c in cases if c["verdict"] == "both-reject"]))
    for heading, group in groups:
        if group:
            lines += [f"## {heading}", "", "| case | verdict | reason |", "|---|---|---|"]
            lines += [f"| `{c['id']}` | {c['verdict']} | {_cell(c['reason'])} |" for c in group]
            lines.append("")
    if comparison.get("compiled_vs_eager"):
        lines.append(cross_markdown(comparison["compiled_vs_eager"]))
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
