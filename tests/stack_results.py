"""What the torch training stack tests (``test_torch_stack.py`` eager,
``test_compiled_stack.py`` compiled) require of a configuration's outcome:
equal to the unsharded model within its dtype's bounds, every gradient in
its parameter's placement, and plain DTensor's outcome printed beside."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from torchrun import children_cpu_seconds, run_torchrun

FLOAT32 = {"loss_rel": 1e-5, "weight_diff": 1e-4}
# bf16 autocast: the forward's matmuls round to bf16 (unit roundoff 2**-8 =
# 3.9e-3), and the sharded run rounds partial products and partial sums in
# another order than the unsharded one. Losses (float32 cross-entropy of bf16
# logits): within one bf16 rounding unit, relative. Weights: Adam divides
# each gradient by its own magnitude, so a component whose gradient is
# within bf16 rounding of zero can take the opposite sign and move by up to
# 2 * lr (lr 1e-2) per step: 3 steps, 6e-2. The worker also measures what
# bf16 itself does to the unsharded model's losses (against float32), and
# parity's loss difference must not exceed it.
BFLOAT16 = {"loss_rel": 2.0**-8, "weight_diff": 2 * 1e-2 * 3}


def run_stack_job(worker: str, result_dir: Path, names: tuple[str, ...], timeout: float) -> dict:
    """One torchrun job of ``worker`` over the configurations ``names``; each
    outcome (parity's, and plain DTensor's where the worker ran it) and the
    job's wall and CPU seconds printed (``pytest -s`` shows them)."""
    result_file = result_dir / "results.json"
    start, cpu_before = time.perf_counter(), children_cpu_seconds()
    run_torchrun(worker, nproc=4, timeout=timeout, args=names,
                 env={"PARITY_RESULT_FILE": str(result_file)})
    print(f"{worker} {' '.join(names)}: {time.perf_counter() - start:.0f} s wall, "
          f"{children_cpu_seconds() - cpu_before:.0f} s CPU (all ranks), load average "
          f"{os.getloadavg()[0]:.1f} at the end")
    found = json.loads(result_file.read_text())
    for name, outcome in found.items():
        parity = outcome["parity"]
        measured = (f"ok, losses {parity['loss_rel']:.1e} rel, weights {parity['weight_diff']:.1e}"
                    if parity["ok"] else parity["error"])
        plain = outcome.get("plain")
        beside = ("" if plain is None
                  else f"; plain DTensor {'ok' if plain['ok'] else plain['error']}")
        print(f"{name}: parity {measured} ({outcome['seconds']} s){beside}")
    return found


def assert_equals_unsharded(name: str, outcome: dict) -> None:
    """parity's outcome of configuration ``name`` equals the unsharded model's."""
    tolerance = BFLOAT16 if name == "tp_autocast" else FLOAT32
    assert outcome["ok"], outcome
    for got, want in zip(outcome["losses"], outcome["ref_losses"], strict=True):
        assert got == pytest.approx(want, rel=tolerance["loss_rel"])
    assert outcome["weight_diff"] <= tolerance["weight_diff"], outcome
    assert outcome["placements_ok"], outcome["misplaced"]
    if name == "tp_autocast":
        assert outcome["loss_rel"] <= outcome["dtype_loss_rel"], outcome
    if name == "tp_inference":
        assert outcome["inference_diff"] <= 1e-4


def assert_plain_dtensor_fails(outcome: dict) -> None:
    """plain DTensor's recorded outcome of a compiled configuration: it fails
    (each error is printed by ``run_stack_job`` and listed in
    docs/torch-stack.md). If one starts passing, update that table."""
    assert not outcome["ok"] and outcome["error"], outcome


def assert_plain_dtensor_fails_on_attention(outcome: dict) -> None:
    """plain DTensor's recorded outcome: torch 2.13 has no sharding strategy
    for the CPU flash-attention op. If this starts passing, torch fixed it:
    update the table in docs/torch-stack.md."""
    assert not outcome["ok"] and "_scaled_dot_product_flash_attention_for_cpu" in outcome["error"], \
        outcome
