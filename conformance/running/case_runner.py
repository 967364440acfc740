"""The report entry of one case, shared by both runners.

``CaseRunner`` is the base of both runners and ``run_case`` its one
``run()`` wrapper of ``run_jax`` and ``run_torch``:
it times the case, turns any exception into an error record (category from
``conformance.running.errors``) and adds the tolerances. ``array_record`` writes one
output or gradient from a ``parity.Placement`` (what both backends'
``describe`` return) and its host values.

An array record (SPEC, "Reports")::

    {"shape": [8, 6], "dtype": "float32", "spec": [["data"], []],
     "shards": {"0": [[0, 4], [0, 6]], ...}, "pending": [], "rule": "typed",
     "values": "b64:float32:8x6:..."}
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import parity

from conformance.catalogue import GRAD_CLASS, Op, get_op, tolerance
from conformance.records.entries import ArrayRecord, CaseResult
from conformance.records.values import encode
from conformance.running.errors import error_record
from parity.placement import Placement


def array_record(values: np.ndarray, placement: Placement | None,
                 rule: str | None) -> ArrayRecord:
    """Report form of one array. ``placement=None``: not distributed (a host
    operand's gradient, a plain tensor), so ``spec`` and ``shards`` are null."""
    values = np.asarray(values)
    rec: dict[str, Any] = {"shape": list(values.shape), "dtype": values.dtype.name}
    if placement is None:
        rec.update({"spec": None, "shards": None, "pending": []})
    else:
        data = placement.to_json()
        rec.update({"shape": data["shape"], "spec": data["spec"], "shards": data["shards"],
                    "pending": data["pending"]})
    rec["rule"] = rule
    rec["values"] = encode(values)
    return rec


def run_case(case: dict[str, Any], execute: Callable[[dict[str, Any], Op], dict[str, Any]],
             device: str) -> CaseResult:
    """``execute(case, op)`` as a report entry: ``status``, ``error``,
    ``outputs``, ``grads`` (and ``notes``) from ``execute``, plus
    ``tolerance``, ``grad_tolerance`` (grad cases) and ``seconds``.

    Every exception ``execute`` raises is a recorded result (the case
    failed on this backend), never a crash of the run. Raises ``KeyError``
    for an op that is not in the catalogue (case files are checked before).
    """
    start = time.perf_counter()
    op = get_op(case["op"])
    entry: dict[str, Any] = {"status": "ok", "error": None, "outputs": [], "grads": []}
    try:
        entry.update(execute(case, op))
    except Exception as err:  # noqa: BLE001 - every failure is a recorded result
        entry = {"status": "error", "error": error_record(err), "outputs": [], "grads": []}
    dtype = entry["outputs"][0]["dtype"] if entry["outputs"] else "float32"
    entry["tolerance"] = tolerance(op.tol, device, dtype)
    if case.get("grad"):
        entry["grad_tolerance"] = tolerance(GRAD_CLASS[op.tol], device)
    entry["seconds"] = round(time.perf_counter() - start, 4)
    return entry


def spec_entries(layout: list[Any]) -> tuple[Any, ...]:
    """A case-file layout as ``parity.P``'s arguments: ``["a", ["b", "c"], null]``
    -> ``("a", ("b", "c"), None)``."""
    return tuple(tuple(e) if isinstance(e, list) else e for e in layout)


def layout_entries(layout: list[Any]) -> tuple[Any, ...]:
    """A case-file layout (``["data", null, ["a", "b"]]``) as
    ``parity.TensorLayout`` axes (``("data", None, ("a", "b"))``)."""
    return tuple(tuple(e) if isinstance(e, list) else e for e in layout)


class CaseRunner(abc.ABC):
    """What both runners share: ``run(case)`` through ``run_case``, and the
    case's mesh and layouts on ``self.backend`` (``parity.jax_ref`` or
    ``parity.torch_impl``). A runner implements ``_execute(case, op)``."""

    backend: Any
    device: str

    def run(self, case: dict[str, Any]) -> CaseResult:
        """The report entry of ``case`` (see ``run_case``)."""
        return run_case(case, self._execute, self.device)

    @abc.abstractmethod
    def _execute(self, case: dict[str, Any], op: Op) -> dict[str, Any]:
        """``{"outputs": [...], "grads": [...]}`` (and ``notes``) of ``case``."""

    def mesh(self, case: dict[str, Any]) -> parity.DeviceMesh:
        """The case's mesh on the first devices of the backend, with the
        case's ``mesh.axis_types`` (absent: ``DeviceMesh``'s default)."""
        shape = tuple(case["mesh"]["shape"])
        devices = self.backend.list_devices()[: int(np.prod(shape))]
        return parity.DeviceMesh(shape, tuple(case["mesh"]["axis_names"]), devices,
                                 axis_types=case["mesh"].get("axis_types"))

    def layout(self, entries: list[Any], mesh: parity.DeviceMesh) -> parity.TensorLayout:
        """A case-file layout bound to ``mesh``."""
        return parity.TensorLayout(layout_entries(entries), mesh)
