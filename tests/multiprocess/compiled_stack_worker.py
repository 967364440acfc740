"""Run under torchrun with 4 gloo ranks: each configuration of
``torch_stack_worker`` with the whole training step inside ``torch.compile``
(``aot_eager``) under ``jax_semantics()`` -- forward, cross-entropy,
``loss.backward()``, ``clip_grad_norm_`` where the configuration clips, Adam
-- 3 steps, against the same model unsharded in this process; plain
DTensor's outcome beside (issue 23). ``tp_inference`` also compiles the
``inference_mode()`` forward after training.

Every configuration compiles with ``dynamic=False`` except ``tp`` (dynamo's
default, automatic dynamic shapes) and the probe ``fsdp_tp_dynamic`` (FSDP2
+ TP with dynamo's default: AOTAutograd fails with ``RecursionError``;
docs/torch-stack.md, "Compiled steps"). The arguments name the
configurations to run (default: all). Rank 0 writes the results to
``PARITY_RESULT_FILE`` (``torch_stack_worker.run_configurations``'s form);
``tests/test_compiled_stack.py`` asserts on them.
"""

from __future__ import annotations

import sys

import torch_stack_worker as eager
from rank_result import report

from parity import torch_impl as ti

STATIC = {"compile": True, "dynamic": False}
CONFIGS = {name: {**config, **STATIC} for name, config in eager.CONFIGS.items()} | {
    "tp": {"compile": True},
    "fsdp_tp_dynamic": {"fsdp": True, "compile": True},
}


def main() -> None:
    ti.initialize()
    report(eager.run_configurations(CONFIGS, sys.argv[1:] or list(CONFIGS)))


if __name__ == "__main__":
    main()
