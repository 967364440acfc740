"""Semantics reports: the header, an incremental writer, and a loader.

While a run goes on, every finished case is appended as one JSON line to
``<out>.partial`` (first line: the header) and flushed, so a run that is
killed keeps every case it finished; ``load_report`` reads such a journal
(marked ``"interrupted": true``). When the run ends, normally or by an
exception or SIGTERM, the writer turns the journal into the report
``<out>`` (SPEC's ``parity.report/1`` JSON) and removes the journal.
"""

from __future__ import annotations

import json
import os
import platform
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import parity
from conformance.catalogue import GRAD_CLASS, TOLERANCES
from conformance.records.entries import CaseEntry

SCHEMA = "parity.report/1"


def versions() -> dict[str, str | None]:
    """Versions of torch, jax and parity, read without importing torch or jax."""
    out: dict[str, str | None] = {}
    for name in ("torch", "jax", "jaxlib", "parity", "numpy"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    if out["parity"] is None:  # run from a checkout on PYTHONPATH, not installed
        out["parity"] = parity.__version__
    return out


def make_header(backend: str, column: str, device: str, mode: str, **extra: Any) -> dict[str, Any]:
    return {
        "schema": SCHEMA, "backend": backend, "column": column, "device": device,
        "mode": mode, "versions": versions(), "python": platform.python_version(),
        "host": platform.node(), "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "tolerances": {"classes": {k: {"rtol": r, "atol": a}
                                   for k, (r, a) in TOLERANCES[device].items()},
                       "grad_class": GRAD_CLASS,
                       "note": ("integer and bool outputs are exact; a comparison uses the "
                                "larger of the two reports' tolerances" +
                                ("; cuda: 'matmul' allows TF32 (rtol=atol=1e-2)"
                                 if device == "cuda" else ""))},
        **extra,
    }


class ReportWriter:
    """Append cases to ``<out>.partial`` as they finish; ``close`` writes ``<out>``."""

    def __init__(self, out: str | Path, header: dict[str, Any]) -> None:
        self.out = Path(out)
        self.journal = Path(str(self.out) + ".partial")
        self.header = dict(header)
        self.count = 0
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.journal, "w", encoding="utf-8")
        self._write(self.header)

    def _write(self, obj: dict[str, Any]) -> None:
        self._file.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._file.flush()

    def update_header(self, **facts: Any) -> None:
        """Facts learned after the start (backend versions, semantics...)."""
        self.header.update(facts)
        self._write({"header_update": facts})

    def add(self, case_entry: CaseEntry) -> None:
        self._write(case_entry)
        self.count += 1

    def close(self, interrupted: bool = False, **facts: Any) -> Path:
        """Write the report, drop the journal; returns the report path."""
        self._file.close()
        report = read_journal(self.journal)
        report.update(facts)
        report["interrupted"] = interrupted
        report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        tmp = Path(str(self.out) + ".tmp")
        tmp.write_text(json.dumps(report, separators=(",", ":")))
        os.replace(tmp, self.out)
        self.journal.unlink(missing_ok=True)
        return self.out


def read_journal(path: str | Path) -> dict[str, Any]:
    """A report from a journal; a torn last line (killed mid-write) is skipped."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    if not lines:
        raise ValueError(f"{path}: empty journal")
    report = json.loads(lines[0])
    report["cases"] = []
    for line in lines[1:]:
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "header_update" in obj:
            report.update(obj["header_update"])
        else:
            report["cases"].append(obj)
    report.setdefault("interrupted", True)
    return report


def load_report(path: str | Path) -> dict[str, Any]:
    """A report file, or the journal ``<path>.partial`` of an unfinished run.

    Raises ``ValueError`` naming the file when neither exists or the schema
    is not ``parity.report/1``.
    """
    report = load_json(path, partial=True)
    if report.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a semantics report: expected \"schema\": {SCHEMA!r}, "
                         f"found {_what(report)}")
    return report


def load_json(path: str | Path, partial: bool = False) -> dict[str, Any]:
    """A JSON object from ``path`` (or, with ``partial``, the journal of an
    unfinished run). Raises ``ValueError`` naming the file for a missing or
    unreadable file, text that is not JSON, or JSON that is not an object."""
    path = Path(path)
    try:
        if partial and not path.exists() and Path(str(path) + ".partial").exists():
            return read_journal(str(path) + ".partial")
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such report" + (f" (nor {path}.partial)" if partial
                                                       else "")) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: cannot read it: {err}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a report: a JSON {type(data).__name__}, not an object")
    return data


def _what(data: dict[str, Any]) -> str:
    if "schema" in data:
        return f"{data['schema']!r}"
    if "cases" in data:
        return "no schema (a case file? `parity run --cases` reads those)"
    return "no schema"
