"""``install_keras()`` / ``uninstall_keras()`` on the installed Keras (issue
12, point 2): keras 3.15.1 in ``.venv``, the pinned keras-nightly in
``.venv-keras-next`` (``scripts/keras_versions.sh``). A forced failure leaves
Keras untouched and names the Keras version and the module; uninstall gives
Keras its own ``distribution_lib`` back. The checks live in
``tests/keras_support/install_checks.py`` and run in one subprocess with
``KERAS_BACKEND=torch``; each check is one test here.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from check_lines import assert_check_passed, check_outcomes
from subprocess_env import child_env

pytestmark = [
    pytest.mark.skipif(
        any(importlib.util.find_spec(m) is None for m in ("keras", "torch")),
        reason="needs the keras extra",
    ),
    pytest.mark.timeout(600),
]
ROOT = Path(__file__).resolve().parents[1]
CHECKS_FILE = ROOT / "tests" / "keras_support" / "install_checks.py"
NAMES = re.findall(r"^def (check_\w+)\(", CHECKS_FILE.read_text(), re.M)


@pytest.fixture(scope="module")
def check_results() -> dict[str, tuple[str, str]]:
    env = child_env(KERAS_BACKEND="torch")
    proc = subprocess.run([sys.executable, str(CHECKS_FILE)], env=env, capture_output=True,
                          text=True, timeout=500, cwd=ROOT)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return check_outcomes(proc.stdout)


@pytest.mark.parametrize("name", NAMES)
def test_keras_install(check_results, name):
    assert_check_passed(check_results, name)
