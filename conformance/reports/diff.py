"""Semantics diffs: what changed between two comparisons (each a candidate
against the JAX reference) made with different torch, jax or parity
versions, or on different devices.

| change            | when                                                     |
|-------------------|----------------------------------------------------------|
| ``fixed``         | the case did not hold before and holds now              |
| ``regressed``     | the case held before and does not now                   |
| ``changed``       | it does not hold either time, for another reason        |
| ``placement moved`` | it holds both times, but an output or gradient sits elsewhere (the reference's or the candidate's spec changed) |
| ``same``          | nothing above                                            |
| ``added`` / ``removed`` | the case is only in the newer / older comparison   |

``SCHEMA`` is ``parity.semantics-diff/1``. Any ``regressed`` case fails.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from conformance.records.entries import Comparison
from conformance.reports.compare import HOLDS

SCHEMA = "parity.semantics-diff/1"
CHANGES = ("fixed", "regressed", "changed", "placement moved", "same", "added", "removed")


def _specs(case: dict[str, Any]) -> list:
    out = []
    for side in ("reference", "candidate"):
        brief = case.get(side) or {}
        out.append([o.get("spec") for o in brief.get("outputs", []) + brief.get("grads", [])])
    return out


def change_of(old: dict[str, Any] | None, new: dict[str, Any] | None) -> tuple[str, str]:
    """``(change, reason)`` for one case id in two comparisons."""
    if old is None:
        return "added", f"new case: {new['verdict']}"
    if new is None:
        return "removed", f"was {old['verdict']}"
    held, holds = old["verdict"] in HOLDS, new["verdict"] in HOLDS
    if held and not holds:
        return "regressed", f"{old['verdict']} -> {new['verdict']}: {new['reason']}"
    if holds and not held:
        return "fixed", f"{old['verdict']} -> {new['verdict']} (was: {old['reason']})"
    if not holds:
        if (old["verdict"], old["reason"]) != (new["verdict"], new["reason"]):
            return "changed", f"{old['verdict']} -> {new['verdict']}: {new['reason']}"
        return "same", ""
    (old_ref, old_cand), (new_ref, new_cand) = _specs(old), _specs(new)
    if (old_ref, old_cand) != (new_ref, new_cand):
        side = "reference" if old_ref != new_ref else "candidate"
        before, after = (old_ref, new_ref) if side == "reference" else (old_cand, new_cand)
        return "placement moved", f"{side} specs {before} -> {after}"
    return "same", ""


def diff_comparisons(old: Comparison, new: Comparison) -> dict[str, Any]:
    """The semantics diff (``parity.semantics-diff/1``) from ``old`` to ``new``."""
    before = {c["id"]: c for c in old["cases"]}
    after = {c["id"]: c for c in new["cases"]}
    rows = []
    for cid in list(before) + [i for i in after if i not in before]:
        change, reason = change_of(before.get(cid), after.get(cid))
        rows.append({"id": cid, "change": change, "reason": reason,
                     "old": (before.get(cid) or {}).get("verdict"),
                     "new": (after.get(cid) or {}).get("verdict")})
    counts = Counter(r["change"] for r in rows)
    return {"schema": SCHEMA,
            "old": {"reference": old["reference"], "candidate": old["candidate"]},
            "new": {"reference": new["reference"], "candidate": new["candidate"]},
            "summary": {c: counts.get(c, 0) for c in CHANGES},
            "ok": counts.get("regressed", 0) == 0,
            "cases": rows}


def versions_line(diff: dict[str, Any]) -> str:
    """``torch 2.13.0 -> 2.14.1; jax 0.10.2 (same)`` from the two candidates' and
    references' headers."""
    parts = []
    for side in ("candidate", "reference"):
        a = (diff["old"][side] or {}).get("versions") or {}
        b = (diff["new"][side] or {}).get("versions") or {}
        for name in ("torch", "jax", "parity"):
            if a.get(name) != b.get(name) and (a.get(name) or b.get(name)):
                parts.append(f"{side} {name} {a.get(name)} -> {b.get(name)}")
        for key in ("device", "column", "semantics"):
            va, vb = (diff["old"][side] or {}).get(key), (diff["new"][side] or {}).get(key)
            if va != vb:
                parts.append(f"{side} {key} {va} -> {vb}")
    return "; ".join(dict.fromkeys(parts)) or "same versions and devices"


def summary_line(diff: dict[str, Any]) -> str:
    s = diff["summary"]
    return (f"semantics diff ({versions_line(diff)}): " + ", ".join(
        f"{s[c]} {c}" for c in CHANGES if s[c] or c in ("fixed", "regressed")))


def to_markdown(diff: dict[str, Any], title: str = "semantics diff") -> str:
    """The summary line, then every case that is not ``same``."""
    lines = [f"# {title}", "", summary_line(diff), ""]
    changed = [r for r in diff["cases"] if r["change"] != "same"]
    if changed:
        lines += ["| case | change | old | new | reason |", "|---|---|---|---|---|"]
        for r in changed:
            reason = r["reason"].replace("|", "\\|").replace("\n", " ")
            lines.append(f"| `{r['id']}` | {r['change']} | {r['old']} | {r['new']} | {reason} |")
    return "\n".join(lines) + "\n"
