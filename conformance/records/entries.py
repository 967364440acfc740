"""The records of a semantics report (``parity.report/1``, docs/reports.md),
typed: what each JSON object holds, key by key. The report stays plain JSON
(these are ``TypedDict``s: dicts at run time, checked by type checkers and,
against real runs, by tests/test_conformance_e2e.py).

A case's entry is its ``CaseFields`` (from the case) plus the ``CaseResult``
a backend's worker returns for it::

    {"id": "add/rows", "op": "add", "mesh": {...}, "inputs": [...], "kwargs": {},
     "grad": true, "status": "ok", "error": null, "outputs": [ArrayRecord],
     "grads": [ArrayRecord], "tolerance": Tolerance, "grad_tolerance": Tolerance,
     "seconds": 0.01}
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

# "class" is a Python keyword: the functional form.
Tolerance = TypedDict("Tolerance", {"class": str, "rtol": float, "atol": float})
Tolerance.__doc__ = "A tolerance class and its (rtol, atol) on the run's device."


class ErrorRecord(TypedDict):
    """Why a case failed on a backend: its category (``conformance.running.errors``),
    the exception type and its message (at most 2,000 characters)."""

    category: str
    type: str
    message: str


class _ArrayOptional(TypedDict, total=False):
    input: int  # a gradient: the index of the input it belongs to
    type: str  # group ``explicit``: ``str(typeof(x))``, e.g. ``float32[8@data,16]``


class ArrayRecord(_ArrayOptional):
    """One output or gradient: global shape, dtype, spec (``None`` when not
    distributed), each device's block, pending reductions, how the placement
    was decided (``typed`` / ``chosen``), and the exact values."""

    shape: list[int]
    dtype: str
    spec: list[list[str]] | None
    shards: dict[str, list[list[int]]] | None
    pending: list[Any]
    rule: str | None
    values: str


class CaseFields(TypedDict):
    """The case, as its report entry starts."""

    id: str
    op: str
    mesh: dict[str, Any]
    inputs: list[dict[str, Any]]
    kwargs: dict[str, Any]
    grad: bool


class _ResultOptional(TypedDict, total=False):
    notes: list[str]  # e.g. JAX's explicit mode refused and auto mode chose
    grad_tolerance: Tolerance  # grad cases
    compile: dict[str, Any]  # the compiled column: graphs, graph ops, seconds


class CaseResult(_ResultOptional):
    """What a backend's worker returns for one case."""

    status: Literal["ok", "error"]
    error: ErrorRecord | None
    outputs: list[ArrayRecord]
    grads: list[ArrayRecord]
    tolerance: Tolerance
    seconds: float


class CaseEntry(CaseFields, CaseResult):
    """One case of a report: the case's fields and its result."""


# ------------------------------------------------------- comparisons
# (``parity.comparison/1``: ``conformance.reports.compare.compare_reports``)


class CaseSide(TypedDict):
    """One report's side of a compared case: what the HTML shows (no values)."""

    status: str | None
    error: ErrorRecord | None
    outputs: list[dict[str, Any]]  # an ArrayRecord without its values
    grads: list[dict[str, Any]]  # the same, with the input it belongs to
    seconds: float | None
    compile: dict[str, Any] | None


class VerdictRow(TypedDict):
    """One case of a comparison: its verdict, why, notes, the case and both sides."""

    id: str
    op: str | None
    verdict: str
    reason: str
    notes: list[str]
    mesh: dict[str, Any] | None
    inputs: list[dict[str, Any]] | None
    kwargs: dict[str, Any] | None
    grad: bool | None
    reference: CaseSide | None
    candidate: CaseSide | None


class _ComparisonOptional(TypedDict, total=False):
    interrupted: bool  # set by parity conformance: a run was interrupted
    compiled_vs_eager: dict[str, Any]  # the compiled column beside the eager one


class Comparison(_ComparisonOptional):
    """A comparison of a candidate report with the reference: the two
    headers, the count per verdict, whether parity holds (``ok``: every
    verdict is match or both-reject) and one row per case."""

    schema: str
    reference: dict[str, Any]
    candidate: dict[str, Any]
    summary: dict[str, int]
    total: int
    chosen_placement_notes: int
    ok: bool
    cases: list[VerdictRow]
