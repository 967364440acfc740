"""The whole training step of torch's own test Transformer inside
``torch.compile`` under ``jax_semantics()``, on 4 gloo ranks (issue 23,
"each of them with the whole step inside torch.compile").

One torchrun job of ``tests/multiprocess/compiled_stack_worker.py`` runs
every configuration of ``test_torch_stack.py`` in sequence (torch's
``Transformer`` with one block, its ``Transformer.parallelize`` plan), with
forward, cross-entropy, ``loss.backward()``, ``clip_grad_norm_`` where the
configuration clips, and Adam in one ``torch.compile`` (``aot_eager``,
``dynamic=False``; ``tp`` with dynamo's default), 3 steps, each against the
same model unsharded in one process, with ``test_torch_stack.py``'s bounds
and asserted separately. Plain DTensor's compiled attempt is recorded once,
for ``tp`` (it fails at the vocab-sharded embedding, before any
configuration's own part; eagerly it fails every configuration:
``test_torch_stack.py``). The job prints its wall and CPU seconds
(``pytest -s``)."""

from __future__ import annotations

import pytest
from stack_results import (
    assert_equals_unsharded,
    assert_plain_dtensor_fails,
    run_stack_job,
)

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

CONFIGS = ("tp", "sp", "tp_clip_foreach", "tp_fused", "tp_inference", "tp_checkpoint",
           "tp_checkpoint_reentrant", "tp_loss_parallel", "fsdp_tp", "tp_autocast")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    # the timeout guards against a hung job; a loaded 2-core machine takes minutes
    return run_stack_job("compiled_stack_worker.py", tmp_path_factory.mktemp("compiled_stack"),
                         CONFIGS, timeout=2400)


@pytest.mark.timeout(2400)
@pytest.mark.parametrize("name", CONFIGS)
def test_compiled_step_equals_unsharded(results, name):
    assert_equals_unsharded(name, results[name]["parity"])


@pytest.mark.timeout(2400)
def test_plain_dtensor_compiled_result_is_recorded(results):
    """plain DTensor's compiled attempt, run once (for ``tp``): AOTAutograd's
    "Mixing fake modes NYI" from ``_MaskPartial``'s mask buffer at the
    vocab-sharded embedding (pytorch#159843). If it changes, torch moved:
    update docs/torch-stack.md's table."""
    outcome = results["tp"]["plain"]
    assert_plain_dtensor_fails(outcome)
    assert "Mixing fake modes" in outcome["error"], outcome
