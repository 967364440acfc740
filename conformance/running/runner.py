"""``parity run``: run cases on one backend and write its semantics report.

``PARITY_JAX_PYTHON`` / ``PARITY_TORCH_PYTHON`` name another interpreter
for that backend's worker (e.g. a Python 3.12 venv with the newest JAX);
the report header records the versions the worker saw.

The cases run in a worker process (``conformance.running.worker``); this process
only feeds it and watches. A case that takes longer than the time limit, or
a worker that dies (segfault, abort, out of memory), is recorded as an error
of category ``other`` (type ``Timeout`` / ``Crash``), the worker is
restarted, and the run goes on with the next case. Every finished case is
flushed to the report journal at once (see ``report``).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import resource
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

from conformance.cases import Case
from conformance.catalogue import get_op, tolerance
from conformance.records.entries import CaseEntry, CaseFields, CaseResult
from conformance.reports.compiled import COLUMN, compile_header
from conformance.reports.report import ReportWriter, make_header
from conformance.running.worker_log import WorkerLog
from conformance.running.worker_process import LineWorker, WorkerGone

READY_TIMEOUT_S = 300.0


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """What ``run_cases`` did: cases written, how many ran ``ok`` and how many
    are errors (``compile_error`` of them compile errors in the compiled
    column, ``None`` elsewhere), wall seconds, the report's path, and whether
    it was interrupted (Ctrl-C / SIGTERM)."""

    cases: int
    ok: int
    error: int
    compile_error: int | None
    seconds: float
    report: str
    interrupted: bool


class Worker(LineWorker):
    """One worker process for one backend and device count."""

    def __init__(self, backend: str, raw: bool, devices: int, device: str, log,
                 compile_backend: str | None = None) -> None:
        python = os.environ.get(f"PARITY_{backend.upper()}_PYTHON") or sys.executable
        cmd = [python, "-m", "conformance.running.worker", "--backend", backend,
               "--devices", str(devices), "--device", device] + (["--raw"] if raw else [])
        if compile_backend:
            cmd += ["--compile", compile_backend]
        env = dict(os.environ)
        if python != sys.executable:  # another interpreter (e.g. newer JAX): this checkout first
            root = str(Path(__file__).resolve().parents[2])
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env.setdefault("OMP_NUM_THREADS", "1")
        super().__init__(cmd, env, log, READY_TIMEOUT_S)
        self.facts = self.ready.get("facts", {})


def _failure(case: Case, kind: str, message: str, device: str) -> CaseResult:
    return {"status": "error", "outputs": [], "grads": [],
            "error": {"category": "other", "type": kind, "message": message},
            "tolerance": tolerance(get_op(case.op).tol, device)}


def run_cases(cases: Sequence[Case], backend: str, out: str | Path, *, raw: bool = False,
              device: str = "cpu", timeout: float = 60.0, progress: bool | str | None = "bar",
              on_case: Callable[[dict], None] | None = None,
              compile_backend: str | None = None) -> RunSummary:
    """Run ``cases`` on ``backend`` and write the report ``out``.

    ``compile_backend`` (torch, not raw): the compiled column, each op inside
    ``torch.compile`` with that dynamo backend (``conformance.running.run_compiled``).
    Returns a ``RunSummary`` (its ``compile_error``: the errors that are
    compile errors, when compiled; else ``None``).
    Raises ``RuntimeError`` when the worker cannot start at all, and
    ``ValueError`` for ``compile_backend`` with ``raw`` or the JAX backend.
    """
    if compile_backend and (raw or backend != "torch"):
        raise ValueError(f"compile_backend={compile_backend!r} applies to the parity torch "
                         f"column only, not backend={backend!r} raw={raw}")
    column = "jax" if backend == "jax" else ("torch-raw" if raw else "torch")
    extra = {}
    if compile_backend:
        column, extra = COLUMN, {"compile": compile_header(compile_backend)}
    mode = "multiprocess" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else "simulated"
    header = make_header(backend, column, device, mode, timeout_s=timeout,
                         case_count=len(cases), **extra)
    writer = ReportWriter(out, header)
    worker_log = WorkerLog(out)
    log, log_path = worker_log.file, worker_log.path
    started = time.monotonic()
    counts = {"ok": 0, "error": 0}
    interrupted = False
    worker: Worker | None = None

    def on_term(signum, frame):  # SIGTERM: finish the report like Ctrl-C
        raise KeyboardInterrupt

    old_term = signal.signal(signal.SIGTERM, on_term)
    bar = _progress(progress, len(cases), column)
    try:
        groups = itertools.groupby(cases, key=lambda c: c.devices)
        for devices, group in groups:
            worker = None
            for case in group:
                if worker is None:
                    worker = Worker(backend, raw, devices, device, log, compile_backend)
                    if not writer.header.get("semantics"):
                        facts = dict(worker.facts)
                        facts["versions"] = {**header["versions"], **facts.get("versions", {})}
                        writer.update_header(**facts)
                t0 = time.monotonic()
                try:
                    worker.send(case.to_json())
                    result = worker.read(timeout)
                    if result is None:
                        worker.kill()
                        worker = None
                        result = _failure(case, "Timeout",
                                          f"case exceeded the {timeout:g} s time limit; worker "
                                          "killed and restarted", device)
                except WorkerGone as gone:
                    worker = None
                    result = _failure(case, "Crash", f"{gone}; worker restarted (see "
                                      f"{log_path.name})", device)
                    result["seconds"] = round(time.monotonic() - t0, 4)
                result.pop("id", None)
                entry: CaseEntry = {**case_fields(case), **result}
                entry.setdefault("seconds", round(time.monotonic() - t0, 4))
                writer.add(entry)
                counts[entry["status"]] = counts.get(entry["status"], 0) + 1
                if compile_backend and (entry.get("error") or {}).get("category") == "compile":
                    counts["compile_error"] = counts.get("compile_error", 0) + 1
                if on_case:
                    on_case(entry)
                bar.advance(entry)
            if worker is not None:
                worker.close()
                worker = None
    except KeyboardInterrupt:
        interrupted = True
    finally:
        signal.signal(signal.SIGTERM, old_term)
        if worker is not None:
            worker.kill()
        bar.stop()
        worker_log.close()  # removed when the workers said nothing
        seconds = round(time.monotonic() - started, 2)
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # finished workers
        path = writer.close(interrupted=interrupted, seconds=seconds,
                            worker_cpu_seconds=round(usage.ru_utime + usage.ru_stime, 1))
    return RunSummary(cases=writer.count, ok=counts["ok"], error=counts["error"],
                      compile_error=counts.get("compile_error", 0) if compile_backend else None,
                      seconds=seconds, report=str(path), interrupted=interrupted)


def case_fields(case: Case) -> CaseFields:
    """The case as a report entry starts: id, op, mesh, inputs, kwargs, grad."""
    data = case.to_json()
    return {"id": data["id"], "op": data["op"], "mesh": data["mesh"],
            "inputs": data["inputs"], "kwargs": data["kwargs"], "grad": data["grad"]}


class _progress:
    """``progress="bar"``: a rich progress bar (a terminal); ``"lines"``: one
    line every ``PARITY_PROGRESS_EVERY_S`` seconds (default 30) with
    done/total, elapsed and ETA (logs, CI); anything else: silent."""

    def __init__(self, enabled: bool | str, total: int, column: str) -> None:
        self.bar = None
        self.lines = enabled == "lines"
        self.total, self.column, self.done = total, column, 0
        self.started = self.last = time.monotonic()
        self.every = float(os.environ.get("PARITY_PROGRESS_EVERY_S", "30"))
        if enabled is not True and enabled != "bar":
            return
        console = Console(stderr=True)
        self.bar = Progress(TextColumn(f"[bold]{column:9}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[errors]} errors"), TimeElapsedColumn(),
                            TimeRemainingColumn(), TextColumn("{task.fields[last]}"),
                            console=console, transient=False)
        self.task = self.bar.add_task(column, total=total, errors=0, last="")
        self.errors = 0
        self.bar.start()

    def advance(self, entry: dict) -> None:
        self.done += 1
        now = time.monotonic()
        if self.lines and now - self.last >= self.every:
            self.last = now
            elapsed = now - self.started
            eta = elapsed * (self.total - self.done) / self.done
            print(f"{self.column}: {self.done}/{self.total} cases, {elapsed:.0f} s elapsed, "
                  f"ETA {eta:.0f} s", file=sys.stderr, flush=True)
        if self.bar is None:
            return
        self.errors += entry["status"] != "ok"
        self.bar.update(self.task, advance=1, errors=self.errors, last=entry["id"][:50])

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
