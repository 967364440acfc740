"""torchtitan 0.3.0's llama3 debug model under ``jax_semantics()`` on 4 gloo ranks.

Each configuration is one torchrun launch of
``tests/multiprocess/torchtitan_worker.py``: the debug model (6 layers, dim
256, fused QKV, RoPE, SwiGLU) parallelised by torchtitan's own
``parallelize_llama`` (its ``partial_dtensor`` backend: DTensor for TP,
FSDP2 for dp; sequence parallel on; its default ``spmd_types`` backend fails
inside torch 2.13's ``fully_shard`` with or without parity), its chunked
cross-entropy, fused AdamW, LR schedule and ``clip_grad_norm_``, 3 steps on
synthetic tokens (global batch 4 x 32),
under parity and under plain DTensor, against the same model unsharded in
one process (fp32: losses within 1e-5 relative). Plain DTensor's outcome is
printed beside parity's (``pytest -s``) and asserted too.

Marker ``torchtitan``; ``bash scripts/torchtitan.sh`` installs torchtitan
(without its heavy dependencies) into .venv and runs them. Without
torchtitan they skip, saying so.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from stack_results import FLOAT32
from torchrun import children_cpu_seconds, run_torchrun

sys.path.insert(0, str(Path(__file__).resolve().parent / "torchtitan_support"))
from titan_loader import torchtitan_missing  # noqa: E402

pytestmark = [
    pytest.mark.torchtitan,
    pytest.mark.timeout(900),
    pytest.mark.skipif(torchtitan_missing() is not None, reason=str(torchtitan_missing())),
]

# tp: tp 4; fsdp_tp: dp 2 x tp 2 (FSDP2 over dp); _ac: full activation
# checkpointing; tp_compile: per-block torch.compile (aot_eager, fullgraph).
CONFIGS = ("tp", "tp_ac", "fsdp_tp", "fsdp_tp_ac", "tp_compile")

_results: dict[str, dict] = {}


def launch(name: str, tmp_path_factory) -> dict:
    """The worker's outcome for configuration ``name`` (one torchrun launch,
    shared by the parity and the plain DTensor test); its wall and CPU
    seconds and both outcomes printed."""
    if name not in _results:
        result_file = tmp_path_factory.mktemp(f"torchtitan_{name}") / "result.json"
        start, cpu_before = time.perf_counter(), children_cpu_seconds()
        run_torchrun("torchtitan_worker.py", nproc=4, timeout=600, args=(name,),
                     env={"PARITY_RESULT_FILE": str(result_file)})
        found = json.loads(result_file.read_text())
        print(f"\n{name}: {time.perf_counter() - start:.0f} s wall, "
              f"{children_cpu_seconds() - cpu_before:.0f} s CPU (all ranks), load average "
              f"{os.getloadavg()[0]:.1f}")
        for side in ("parity", "plain"):
            out = found[side]
            print(f"  {side}: " + (f"ok, losses {out['loss_rel']:.1e} rel, weights "
                                   f"{out['weight_diff']:.1e}" if out["ok"] else out["error"]))
        _results[name] = found
    return _results[name]


def assert_equals_unsharded(outcome: dict) -> None:
    """Losses within 1e-5 relative of the unsharded model's, final weights within 1e-4."""
    assert outcome["ok"], outcome
    for got, want in zip(outcome["losses"], outcome["ref_losses"], strict=True):
        assert got == pytest.approx(want, rel=FLOAT32["loss_rel"])
    assert outcome["weight_diff"] <= FLOAT32["weight_diff"], outcome


@pytest.mark.parametrize("name", CONFIGS)
def test_parity_equals_unsharded(name, tmp_path_factory):
    assert_equals_unsharded(launch(name, tmp_path_factory)["parity"])


@pytest.mark.parametrize("name", CONFIGS)
def test_plain_dtensor_equals_unsharded(name, tmp_path_factory):
    """Plain DTensor's result, recorded beside parity's: torchtitan's own
    path is equal to unsharded, so a parity failure is parity's."""
    assert_equals_unsharded(launch(name, tmp_path_factory)["plain"])
