"""How the torchrun workers of the compile tests report: rank 0 writes the
results to ``PARITY_RESULT_FILE`` for the test to read; every rank prints
that it finished (the test's rank count)."""

from __future__ import annotations

import json
import os

from parity import torch_impl as ti


def report(results: dict, echo: bool = False) -> None:
    """Rank 0 writes ``results`` as JSON; each rank prints ``rank N: ok``
    (with the results when ``echo``)."""
    if ti.process_id() == 0:
        with open(os.environ["PARITY_RESULT_FILE"], "w") as f:
            json.dump(results, f)
    print(f"rank {ti.process_id()}: ok" + (f" {results}" if echo else ""), flush=True)
