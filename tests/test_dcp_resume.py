"""DCP resume across torchrun jobs, onto the same and another mesh (issue 23).

Job 1 trains FSDP2 + TP (mesh (2, 2)) under ``jax_semantics()``, records
the uninterrupted losses, and saves model and Adam state mid-training with
``torch.distributed.checkpoint``; job 2 loads it onto the same layout and
onto TP alone over a 1-D mesh of 4, and trains on: the losses equal the
uninterrupted run's (``tests/multiprocess/dcp_resume_worker.py``).

In CI (``multiprocess``): save after 2 of 3 steps, resume for the third.
Opt-in (``PARITY_STACK=1 pytest -m stack``): save after 2 of 4, resume for 2."""

from __future__ import annotations

import json
import os

import pytest
from torchrun import run_torchrun


def resume(tmp_path, steps: int, save_at: int) -> None:
    ckpt, saved, loaded = tmp_path / "ckpt", tmp_path / "save.json", tmp_path / "load.json"
    counts = (str(steps), str(save_at))
    run_torchrun("dcp_resume_worker.py", nproc=4, timeout=300,
                 args=("save", str(ckpt), "fsdp_tp", *counts),
                 env={"PARITY_RESULT_FILE": str(saved)})
    run_torchrun("dcp_resume_worker.py", nproc=4, timeout=300,
                 args=("load", str(ckpt), "fsdp_tp,tp", *counts),
                 env={"PARITY_RESULT_FILE": str(loaded)})
    before, after = json.loads(saved.read_text()), json.loads(loaded.read_text())
    uninterrupted = before["uninterrupted"]
    assert len(uninterrupted) == steps
    assert before["before_save"] == pytest.approx(uninterrupted[:save_at], rel=1e-6)
    for layout in ("fsdp_tp", "tp"):
        assert after[layout] == pytest.approx(uninterrupted[save_at:], rel=1e-5), (layout, after)


@pytest.mark.multiprocess
@pytest.mark.timeout(600)
def test_resume_for_one_step_on_two_meshes(tmp_path):
    resume(tmp_path, steps=3, save_at=2)


@pytest.mark.stack
@pytest.mark.skipif(
    os.environ.get("PARITY_STACK") != "1",
    reason="opt-in group (minutes of torchrun jobs, beyond CI's budget): PARITY_STACK=1 pytest -m stack")
@pytest.mark.timeout(1200)
def test_resume_in_a_new_job_continues_with_the_same_losses(tmp_path):
    resume(tmp_path, steps=4, save_at=2)
