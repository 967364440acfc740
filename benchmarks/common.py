"""Rows, timing and the machine description shared by every benchmark family."""

from __future__ import annotations

import dataclasses
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass
class Row:
    """One line of the table: parity's figure against the raw one."""

    family: str
    case: str
    parity: float | None = None  # seconds (or bytes or a count, see unit)
    raw: float | None = None
    unit: str = "s"  # "s" seconds, "B" bytes, "n" a count (e.g. collective launches)
    goal: float | None = None  # the ratio parity/raw must not exceed
    status: str = "ok"  # ok | not available: ... | skipped: ... | error: ...
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.parity is None or not self.raw:
            return None
        return self.parity / self.raw

    @property
    def verdict(self) -> str:
        if self.status != "ok" or self.ratio is None:
            return ""
        if self.goal is None:
            return "info"
        return "met" if self.ratio <= self.goal else f"missed by {self.ratio / self.goal - 1:.1%}"

    def as_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["ratio"] = self.ratio
        out["verdict"] = self.verdict
        return out


def unavailable(family: str, case: str, why: str) -> Row:
    return Row(family, case, status=f"not available: {why}")


def timed_pairs(parity_fn: Callable[[], Any], raw_fn: Callable[[], Any], *, iters: int,
                repeats: int, warmup: int = 1, before: Callable[[], None] | None = None,
                sync: Callable[[], None] | None = None,
                parity_context: Callable[[], Any] | None = None) -> tuple[list[float], list[float]]:
    """Per-call seconds of ``parity_fn`` and ``raw_fn``, ``repeats`` samples each.

    The two alternate (ABAB...) so that drift on a shared machine hits both
    alike; ``warmup`` rounds are run first and dropped. ``before`` runs
    untimed ahead of each sample (a barrier across ranks), ``sync`` inside
    the timed region after the calls (e.g. ``torch.cuda.synchronize``).
    ``parity_context`` (a context manager factory) is entered around each
    parity sample, outside the timer.
    """
    import contextlib

    samples: dict[int, list[float]] = {0: [], 1: []}
    for round_ in range(warmup + repeats):
        for which, fn in enumerate((parity_fn, raw_fn)):
            scope = parity_context() if (parity_context and which == 0) else contextlib.nullcontext()
            with scope:
                if before:
                    before()
                start = time.perf_counter()
                for _ in range(iters):
                    fn()
                if sync:
                    sync()
                elapsed = (time.perf_counter() - start) / iters
            if round_ >= warmup:
                samples[which].append(elapsed)
    return samples[0], samples[1]


def child_records(module: str, *args: str) -> list[dict[str, Any]]:
    """The JSON lines ``python -m module *args`` prints, one dict each, run in
    a child process from the repository root (for figures measured on a
    process-wide fake process group). Raises
    ``subprocess.CalledProcessError`` when the child fails."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    proc = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parents[1])
    return [json.loads(line) for line in proc.stdout.splitlines()]


def load_average() -> str:
    """The machine's 1, 5 and 15 minute load averages, as ``/proc/loadavg`` writes them."""
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def median(values: list[float]) -> float:
    return statistics.median(values)


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity where the OS tells)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def machine() -> dict[str, Any]:
    """What the figures came from."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpu": _cpu_name(),
    }
    info["affinity_cpus"] = usable_cpus()
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        info["cuda_devices"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        info["torch"] = None
    from importlib.metadata import PackageNotFoundError, version

    for name in ("jax", "keras"):
        try:
            info[name] = version(name)  # without importing it
        except PackageNotFoundError:
            info[name] = None
    return info


def provenance(command: str) -> dict[str, Any]:
    """When, where and on which code a run was made (``scripts/measurements.py``
    renders a results file only with this): the UTC date, the checkout's
    commit (``None`` outside a git checkout), the load average, the command."""
    import datetime
    import subprocess

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=os.path.dirname(os.path.abspath(__file__)), timeout=10,
                                check=True).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(), "commit": commit,
            "load": f"load average {load[0]:.1f} at the end" if load else None, "command": command}


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}".replace(".0 ", " ")
        n /= 1024
    return f"{n} B"


def human_value(value: float | None, unit: str) -> str:
    """``value`` in its unit (``Row.unit``: seconds, bytes or a count) for a table cell."""
    if value is None:
        return ""
    if unit == "B":
        return human_bytes(value)
    if unit == "n":
        return f"{value:g}"
    return human_seconds(value)


def human_seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def rank_max(values: list[float]) -> list[float]:
    """Element-wise max over ranks (the slowest rank sets a collective's pace)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()
