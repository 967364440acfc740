"""Running from the folder that holds a checkout named ``parity`` (issue 12,
point 4): ``import parity`` must not silently give the checkout's top folder
(a namespace package with no ``use_backend``); it fails and says what
happened. The checkout's top-level ``__init__.py`` does this."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_python(cwd: Path, code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_import_beside_a_checkout_named_parity_fails_and_says_why(tmp_path):
    (tmp_path / "parity").symlink_to(ROOT, target_is_directory=True)
    proc = run_python(tmp_path, "import parity")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: `import parity` found"), proc.stderr
    assert str(tmp_path / "parity") in last and "top folder of a parity checkout" in last
    assert "Fix: run from another folder" in last


def test_import_elsewhere_gives_the_package(tmp_path):
    proc = run_python(tmp_path, "import parity; print(callable(parity.use_backend))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


def test_import_from_inside_the_checkout_gives_the_package():
    proc = run_python(ROOT, "import parity; print(parity.__file__)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(ROOT / "parity" / "__init__.py")
