"""Keras 3 on torch through parity: behaviour (issue 5, points 1-4).

The checks live in ``tests/keras_support/torch_checks.py`` and run in one
subprocess with ``KERAS_BACKEND=torch`` (Keras reads it at import), on 8
simulated devices; each check is one test here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import importlib.util

import pytest
from check_lines import assert_check_passed, check_outcomes
from subprocess_env import child_env

pytestmark = [
    pytest.mark.skipif(
        any(importlib.util.find_spec(m) is None for m in ("keras", "torch")),
        reason="needs the keras extra",
    ),
    pytest.mark.timeout(900),
]
ROOT = Path(__file__).resolve().parents[1]
CHECKS_FILE = ROOT / "tests" / "keras_support" / "torch_checks.py"
NAMES = re.findall(r"^def (check_\w+)\(", CHECKS_FILE.read_text(), re.M)



def run_keras(script: Path, backend: str, *args: str, timeout: float = 600) -> str:
    env = child_env(KERAS_BACKEND=backend)
    proc = subprocess.run(
        [sys.executable, str(script), *args], env=env, capture_output=True, text=True,
        timeout=timeout, cwd=ROOT,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return proc.stdout


@pytest.fixture(scope="module")
def check_results() -> dict[str, tuple[str, str]]:
    return check_outcomes(run_keras(CHECKS_FILE, "torch"))


@pytest.mark.parametrize("name", NAMES)
def test_keras_torch(check_results, name):
    assert_check_passed(check_results, name)
