"""The README's examples run as written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_same_program_example_runs_and_agrees():
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "same_program.py")],
        capture_output=True, text=True, timeout=180, cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "device 1 holds rows (4, 6) on both backends" in out.stdout
