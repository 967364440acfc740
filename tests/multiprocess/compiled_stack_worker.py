"""Run under torchrun with 4 gloo ranks: each configuration of
``torch_stack_worker`` with the whole training step inside ``torch.compile``
(``aot_eager``) under ``jax_semantics()`` -- forward, cross-entropy,
``loss.backward()``, ``clip_grad_norm_`` where the configuration clips, Adam
-- 3 steps, against the same model unsharded in this process (issue 23).
``tp_inference`` also compiles the ``inference_mode()`` forward after
training.

The compiled model has one block, not the eager test's two: dynamo traces
parity's mode op by op, so the compile costs about as much per block as the
rest of the step, and one block already holds every op and every plan entry
of the model (norms, the four attention projections, SDPA, the feed-forward
pair), each sharded by ``Transformer.parallelize`` as in the two-block model.
Plain DTensor's compiled attempt runs once, for ``tp`` (``PLAIN``): it fails
at the vocab-sharded embedding before any configuration's own part is
reached (docs/torch-stack.md), the same error in every configuration.

Every configuration compiles with ``dynamic=False`` except ``tp`` (dynamo's
default, automatic dynamic shapes) and the probe ``fsdp_tp_dynamic`` (FSDP2
+ TP with dynamo's default, two blocks: AOTAutograd's ``RecursionError``,
torch's own, ``tests/test_dynamic_shapes_upstream.py``). The arguments name the configurations to run (default: all but the
probe). Rank 0 writes the results to ``PARITY_RESULT_FILE``
(``torch_stack_worker.run_configurations``'s form);
``tests/test_compiled_stack.py`` asserts on them.
"""

from __future__ import annotations

import sys

import torch_stack_worker as eager
from rank_result import report

from parity import torch_impl as ti

COMPILED = {"compile": True, "layers": 1}
CONFIGS = {name: {**config, **COMPILED, "dynamic": False} for name, config in eager.CONFIGS.items()}
CONFIGS["tp"] = COMPILED
PROBES = {"fsdp_tp_dynamic": {"fsdp": True, "compile": True}}
PLAIN = ("tp",)


def main() -> None:
    ti.initialize()
    report(eager.run_configurations(CONFIGS | PROBES, sys.argv[1:] or list(CONFIGS), plain=PLAIN))


if __name__ == "__main__":
    main()
