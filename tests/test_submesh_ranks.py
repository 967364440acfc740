"""FSDP2 + TP on 4 gloo ranks with parameters on a mesh and its ``dp``
submesh (``layouts/submesh.py``): one torchrun job
(``tests/multiprocess/submesh_worker.py``) trains torch's own test
Transformer with ``clip_grad_norm_`` and AdamW for 2 steps under
``jax_semantics()``, eager and compiled, against the unsharded model.
Plain DTensor's outcome is recorded beside: its step fails on the CPU
flash-attention op, and its ``clip_grad_norm_`` over the same gradients
on the two meshes (the reported case)."""

from __future__ import annotations

import json
import time

import pytest
from torchrun import run_torchrun

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(600)]

CONFIGS = ("eager_foreach", "eager_fused", "compiled_foreach")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    result_file = tmp_path_factory.mktemp("submesh") / "results.json"
    start = time.perf_counter()
    run_torchrun("submesh_worker.py", nproc=4, timeout=580, args=CONFIGS,
                 env={"PARITY_RESULT_FILE": str(result_file)})
    found = json.loads(result_file.read_text())
    print(f"submesh_worker: {time.perf_counter() - start:.0f} s wall; "
          f"plain DTensor: {found['eager_foreach']['plain']}; "
          f"plain clip_grad_norm_: {found['eager_foreach']['plain_clip']}")
    return found


@pytest.mark.parametrize("name", CONFIGS)
def test_fsdp2_and_tp_over_a_mesh_and_its_submesh_equal_the_unsharded(results, name):
    outcome = results[name]["parity"]
    assert outcome["ok"], outcome
    assert [names for names, _ in outcome["meshes"]] == [["dp"], ["dp", "tp"]]  # both meshes
    for got, want in zip(outcome["losses"], outcome["ref_losses"], strict=True):
        assert got == pytest.approx(want, rel=1e-5)
    assert outcome["weight_diff"] <= 1e-4, outcome
    assert outcome["placements_ok"], outcome["misplaced"]


def test_plain_dtensor_s_outcome_is_recorded(results):
    """If either starts passing, torch changed: the attention op got a
    strategy, or DTensor met the submesh itself."""
    plain = results["eager_foreach"]["plain"]
    assert not plain["ok"] and "flash_attention" in plain["error"], plain
    clip = results["eager_foreach"]["plain_clip"]
    assert not clip["ok"] and "must have the same mesh" in clip["error"], clip


def test_a_dp_mesh_built_apart_meets_the_2d_mesh_by_names_and_ranks(results):
    apart = results["built_apart"]
    assert apart["ok"], apart
    assert not apart["same_root"] and apart["mesh"] == ["dp", "tp"]
    assert apart["value_diff"] == 0.0
    assert apart["grad_mesh"] == ["dp"] and apart["grad_placements"] == "(Shard(dim=0),)"
    assert apart["grad_diff"] <= 1e-5
