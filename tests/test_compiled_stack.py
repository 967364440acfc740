"""The whole training step of torch's own test Transformer inside
``torch.compile`` under ``jax_semantics()``, on 4 gloo ranks (issue 23,
"each of them with the whole step inside torch.compile").

torchrun jobs of ``tests/multiprocess/compiled_stack_worker.py``: each
configuration of ``test_torch_stack.py`` (torch's ``Transformer``, its
``Transformer.parallelize`` plan) with forward, cross-entropy,
``loss.backward()``, ``clip_grad_norm_`` where the configuration clips, and
Adam in one ``torch.compile`` (``aot_eager``, ``dynamic=False``; ``tp`` with
dynamo's default), 3 steps, against the same model unsharded in one process,
with ``test_torch_stack.py``'s bounds; plain DTensor's outcome printed
beside (it cannot run this model on CPU eagerly -- no sharding strategy for
the flash-attention op -- and fails compiled too, the error printed per
configuration).

Each configuration costs a minute or more of compiling on CI's 2 cores, and
CI's slow + multiprocess step has room for a few: ``CI`` runs there (one
job); the others are the opt-in ``stack`` group (one job:
``PARITY_STACK=1 pytest -m stack``)."""

from __future__ import annotations

import os

import pytest
from stack_results import (
    assert_equals_unsharded,
    assert_plain_dtensor_fails,
    run_stack_job,
)

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

CI = ("tp", "fsdp_tp")
OPT_IN = ("sp", "tp_clip_foreach", "tp_fused", "tp_inference", "tp_checkpoint",
          "tp_checkpoint_reentrant", "tp_loss_parallel", "tp_autocast")


@pytest.fixture(scope="module")
def ci_results(tmp_path_factory):
    return run_stack_job("compiled_stack_worker.py", tmp_path_factory.mktemp("compiled_stack"),
                         CI, timeout=900)


@pytest.fixture(scope="module")
def opt_in_results(tmp_path_factory):
    return run_stack_job("compiled_stack_worker.py", tmp_path_factory.mktemp("compiled_stack"),
                         OPT_IN, timeout=1800)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", CI)
def test_compiled_step_equals_unsharded(ci_results, name):
    assert_equals_unsharded(name, ci_results[name]["parity"])
    assert_plain_dtensor_fails(ci_results[name]["plain"])


@pytest.mark.stack
@pytest.mark.skipif(os.environ.get("PARITY_STACK") != "1",
                    reason="opt-in group (a compile of minutes per configuration, beyond CI's "
                           "budget): PARITY_STACK=1 pytest -m stack")
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", OPT_IN)
def test_compiled_configuration_equals_unsharded(opt_in_results, name):
    assert_equals_unsharded(name, opt_in_results[name]["parity"])
    assert_plain_dtensor_fails(opt_in_results[name]["plain"])
