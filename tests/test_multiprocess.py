"""The real engine: 4 gloo ranks under torchrun (marked ``multiprocess``)."""

from __future__ import annotations

import pytest
from torchrun import run_torchrun

pytestmark = pytest.mark.multiprocess


def test_distribute_collectives_and_data_input_on_four_gloo_ranks():
    output = run_torchrun("api_worker.py", nproc=4)
    for rank in range(4):
        assert f"rank {rank}: ok" in output


def test_random_ops_give_the_unsharded_values_on_four_gloo_ranks():
    # issue 25: every rank draws what one process draws after the same seed
    output = run_torchrun("random_worker.py", nproc=4)
    for rank in range(4):
        assert f"rank {rank}: ok" in output
