"""``parity.keras_layout`` (issue 27) on a model of Keras's own layers, no
keras-hub: the default suite's share of what ``tests/test_keras_layout.py``
checks on keras-hub's models (that file needs the ``.keras-hub`` overlay
and runs in CI's keras-hub step).

``tests/keras_support/layout_checks.py --model plain`` runs in one process
per backend, JAX first: its ``CHECK`` lines (the derived map on (2, 4) and
(1, 8), the report of a renamed key, an abstract build of 6.6 GB that
allocates nothing, typed errors) are one test each per backend; its
measured run (two ``fit`` calls under ``ModelParallel`` on a (2, 4) mesh
of 8 simulated devices, the derived map plus a key renamed away) checks
that torch + parity's local storage equals the report, that the dead key
warns once under parity's shim and not under JAX's Keras, and that the
losses equal JAX's.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from check_lines import assert_check_passed, check_outcomes
from conftest import needs_keras_extra
from subprocess_env import child_env

pytestmark = [needs_keras_extra, pytest.mark.timeout(1800)]
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "keras_support" / "layout_checks.py"
NAMES = re.findall(r"^def (check_\w+)\(", SCRIPT.read_text(), re.M)
sys.path.insert(0, str(SCRIPT.parent))
from layout_checks import assert_storage_and_warning, run_on_both_backends  # noqa: E402


@pytest.fixture(scope="module")
def runs():
    return run_on_both_backends("plain", lambda backend: child_env(KERAS_BACKEND=backend))


@pytest.mark.parametrize("backend", ["jax", "torch"])
@pytest.mark.parametrize("name", NAMES)
def test_keras_layout_on_a_plain_keras_model(runs, name, backend):
    assert_check_passed(check_outcomes(runs[backend][0]), name)


def test_torch_local_storage_equals_the_report_and_a_dead_key_warns_once(runs):
    assert_storage_and_warning(runs["jax"][1], runs["torch"][1])


def test_import_parity_keras_layout_loads_no_framework():
    code = ("import parity.keras_layout, sys; "
            "print(any(m in sys.modules for m in ('keras', 'torch', 'jax')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=child_env(), cwd=ROOT)
    assert out.stdout.split() == ["False"]
