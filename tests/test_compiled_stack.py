"""The whole training step of torch's own test Transformer inside
``torch.compile`` under ``jax_semantics()``, on 4 gloo ranks (issue 23,
"each of them with the whole step inside torch.compile").

One torchrun job (``tests/multiprocess/compiled_stack_worker.py``): torch's
``Transformer`` with its ``Transformer.parallelize`` plan, forward,
cross-entropy, ``loss.backward()`` and Adam in one ``torch.compile``
(``aot_eager``), 3 steps, TP on a 1-D mesh of 4 and FSDP2 over ``dp`` + TP
over ``tp`` on a (2, 2) mesh, against the same model unsharded in one process:
loss per step rtol 1e-5, final weights atol 1e-4. Plain DTensor cannot run
this model at all on CPU (no sharding strategy for the flash-attention op:
``tests/test_torch_stack.py``)."""

from __future__ import annotations

import json

import pytest
from torchrun import run_torchrun

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow, pytest.mark.timeout(900)]

# fsdp_tp_static: FSDP2 + TP compiled with dynamic=False (with dynamo's
# automatic dynamic shapes AOTAutograd fails: docs/torch-stack.md, "Compiled steps")
CONFIGS = ("tp", "fsdp_tp_static")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    result_file = tmp_path_factory.mktemp("compiled_stack") / "results.json"
    run_torchrun("compiled_stack_worker.py", nproc=4, timeout=900, args=CONFIGS,
                 env={"PARITY_RESULT_FILE": str(result_file)})
    return json.loads(result_file.read_text())


@pytest.mark.parametrize("name", CONFIGS)
def test_compiled_step_equals_unsharded(results, name):
    outcome = results[name]
    assert outcome["ok"], outcome
    for got, want in zip(outcome["losses"], outcome["ref_losses"], strict=True):
        assert got == pytest.approx(want, rel=1e-5)
    assert outcome["weight_diff"] <= 1e-4, outcome
    assert outcome["sharded"] > 0 and outcome["placements_kept"], outcome
