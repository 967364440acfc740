"""Keras's own torch distribution, without parity (issue 12, point 3): the
"Keras's own torch" column of docs/keras.md's table, run on a Keras that ships
``keras.src.backend.torch.distribution_lib`` (the pinned keras-nightly,
through ``scripts/keras_versions.sh``). The one-process checks are in
``tests/keras_support/keras_own_checks.py``; the rows that need several
ranks run under torchrun on 4 gloo ranks (``tests/multiprocess/keras_own_worker.py``,
and the parity driver with ``--keras-own`` against JAX on 4 devices). Each
check is one test here. On keras 3.15.1, which has no torch distribution,
they skip.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from check_lines import assert_check_passed, check_outcomes
from test_keras_torch import run_keras


def _keras_has_own_torch_distribution() -> bool:
    if importlib.util.find_spec("keras") is None or importlib.util.find_spec("torch") is None:
        return False
    # Looked up on disk: importing keras.src here would start Keras's default
    # backend (TensorFlow) in the test process.
    (keras_dir,) = importlib.util.find_spec("keras").submodule_search_locations
    return (Path(keras_dir) / "src" / "backend" / "torch" / "distribution_lib.py").is_file()


pytestmark = [
    pytest.mark.skipif(not _keras_has_own_torch_distribution(),
                       reason="this Keras has no torch distribution_lib of its own (keras-nightly has)"),
    pytest.mark.timeout(600),
]
CHECKS_FILE = Path(__file__).resolve().parent / "keras_support" / "keras_own_checks.py"
NAMES = re.findall(r"^def (check_\w+)\(", CHECKS_FILE.read_text(), re.M)
RANK_CHECKS_FILE = Path(__file__).resolve().parent / "multiprocess" / "keras_own_worker.py"
RANK_NAMES = re.findall(r"^def (check_\w+)\(", RANK_CHECKS_FILE.read_text(), re.M)
RANKS = 4


@pytest.fixture(scope="module")
def check_results() -> dict[str, tuple[str, str]]:
    return check_outcomes(run_keras(CHECKS_FILE, "torch"))


@pytest.mark.parametrize("name", NAMES)
def test_keras_own_torch_distribution(check_results, name):
    assert_check_passed(check_results, name)


@pytest.fixture(scope="module")
def rank_check_output() -> str:
    from torchrun import run_torchrun

    return run_torchrun(RANK_CHECKS_FILE.name, nproc=RANKS, timeout=540)


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", RANK_NAMES)
def test_keras_own_torch_on_4_ranks(rank_check_output, name):
    assert rank_check_output.count(f"CHECK {name} ") == RANKS, rank_check_output[-3000:]
    assert_check_passed(check_outcomes(rank_check_output), name)


@pytest.mark.multiprocess
@pytest.mark.timeout(900)
def test_keras_own_torch_training_on_4_ranks_equals_jax(tmp_path):
    """Keras's own torch backend trains the parity tests' four models
    (DataParallel and ModelParallel, MLP and transformer block) on 4 gloo
    ranks to JAX's losses, weights and layouts on 4 devices."""
    from test_keras_parity import torchrun_4_ranks_match_jax

    torchrun_4_ranks_match_jax(tmp_path, "--keras-own")
