"""Conformance throughput: cases per second per backend, through the
conformance runner (``conformance.running.runner.run_cases``) on a fixed slice of
the default catalogue, each backend in its own worker process as
``parity conformance`` runs them. Worker start-up is included (it is part
of what a user waits for); the raw-DTensor column is the reference.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from benchmarks.common import Row


def run(cfg: dict) -> list[Row]:
    from conformance.cases import default_cases
    from conformance.running.runner import run_cases

    cases = list(default_cases())
    step = max(1, len(cases) // cfg["conformance_cases"])
    subset = cases[::step][: cfg["conformance_cases"]]
    rates: dict[str, float] = {}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for column, backend, raw in [("torch-raw", "torch", True), ("torch", "torch", False),
                                     ("jax", "jax", False)]:
            started = time.perf_counter()
            try:
                summary = run_cases(subset, backend, Path(tmp) / f"{column}.json", raw=raw,
                                    progress=False)
            except Exception as err:  # noqa: BLE001
                rows.append(Row("conformance", f"{column}: {len(subset)} cases",
                                status=f"error: {type(err).__name__}: {err}"[:200]))
                continue
            seconds = time.perf_counter() - started
            rates[column] = summary.cases / seconds
        for column in ("torch", "jax"):
            if column in rates and "torch-raw" in rates:
                # A time per case, so that the ratio reads like the others (lower is better).
                rows.append(Row("conformance", f"{column}: {len(subset)} cases "
                                f"({rates[column]:.1f} cases/s; raw DTensor {rates['torch-raw']:.1f})",
                                1 / rates[column], 1 / rates["torch-raw"],
                                note="seconds per case vs the raw-DTensor column; worker start-up included"))
    return rows
