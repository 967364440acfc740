"""torch's training stack under ``jax_semantics()`` on 4 gloo ranks (issue 23).

One torchrun job (``tests/multiprocess/torch_stack_worker.py``) trains
torch's own test Transformer with its own ``Transformer.parallelize`` plan in
each configuration, under parity and under plain DTensor, against the same
model unsharded in one process. Plain DTensor's outcome is printed beside
parity's (``pytest -s`` shows it); torch 2.13's plain DTensor fails every
configuration (no sharding strategy for the CPU flash-attention op). The
same configurations compiled: ``test_compiled_stack.py``."""

from __future__ import annotations

import pytest
from stack_results import (
    assert_equals_unsharded,
    assert_plain_dtensor_fails_on_attention,
    run_stack_job,
)

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(600)]

CONFIGS = ("tp", "sp", "tp_clip_foreach", "tp_fused", "tp_inference", "tp_checkpoint",
           "tp_checkpoint_reentrant", "tp_loss_parallel", "fsdp_tp", "tp_autocast")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_stack_job("torch_stack_worker.py", tmp_path_factory.mktemp("torch_stack"),
                         CONFIGS, timeout=600)


@pytest.mark.parametrize("name", CONFIGS)
def test_configuration_equals_unsharded(results, name):
    assert_equals_unsharded(name, results[name]["parity"])


def test_plain_dtensor_result_is_recorded(results):
    """What plain DTensor does with the same job (the table in docs/torch-stack.md)."""
    for name in CONFIGS:
        assert_plain_dtensor_fails_on_attention(results[name]["plain"])
