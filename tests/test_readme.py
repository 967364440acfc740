"""Every Python block of README.md runs as written, each in a fresh
interpreter from the repository root (so a block cannot lean on another's
imports)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def python_blocks(text: str) -> list[tuple[int, str]]:
    """``(line number, code)`` of each fenced ```python block."""
    blocks = []
    for match in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
        blocks.append((text.count("\n", 0, match.start()) + 1, match.group(1)))
    return blocks


BLOCKS = python_blocks((ROOT / "README.md").read_text())


def test_the_readme_has_python_blocks_and_the_extractor_finds_them():
    assert len(BLOCKS) >= 3
    assert python_blocks("a\n```python\nx = 1\n```\n```bash\nls\n```\n") == [(2, "x = 1\n")]


@pytest.mark.slow
@pytest.mark.parametrize("line, code", BLOCKS, ids=[f"README.md:{n}" for n, _ in BLOCKS])
def test_readme_python_block_runs_as_written(line, code):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=280, cwd=ROOT)
    assert out.returncode == 0, f"README.md line {line}:\n{out.stderr[-3000:]}"
