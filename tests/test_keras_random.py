"""Keras's seeded random ops under a distribution (issue 25).

* over 8 simulated ranks on the (2, 4) and (2, 2, 2) meshes
  (``tests/keras_support/random_checks.py``, one subprocess with
  ``KERAS_BACKEND=torch``): every ``keras.random`` op and
  ``Dropout``, seeded by an int, by a ``SeedGenerator`` made under the
  distribution or unseeded, called outside a train step, gives every rank
  plain Keras's values (before: ranks after the first drew further along an
  explicit generator, and a ``SeedGenerator`` raised DTensor's "mixed
  torch.Tensor and DTensor");
* on 4 gloo ranks (``tests/multiprocess/keras_dropout_worker.py``): a model
  with two ``Dropout`` layers trained 2 steps under ``ModelParallel`` on a
  (2, 2) ``("batch", "model")`` mesh (each process passes its half of the
  batch) ends with the weights the same model gets in one plain process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs_keras_extra
from subprocess_env import child_env

pytestmark = [needs_keras_extra, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[1]


def test_keras_random_ops_give_plain_values_on_every_simulated_rank():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "keras_support" / "random_checks.py")],
        env=child_env(KERAS_BACKEND="torch"), capture_output=True, text=True, timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    for mesh in ("2x4", "2x2x2"):
        assert f"ok {mesh} Dropout of a sharded input" in proc.stdout
        assert proc.stdout.count(f"ok {mesh} ") == 9 * 3 + 1, proc.stdout


@pytest.mark.multiprocess
def test_keras_dropout_model_on_four_gloo_ranks_equals_one_process():
    from torchrun import run_torchrun

    output = run_torchrun("keras_dropout_worker.py", nproc=4, timeout=300)
    for rank in range(4):
        assert f"rank {rank}: ok" in output
