"""``examples/megatron_three_ways.py`` (docs/from-jax.md's tutorial) runs as
written: the MLP with Auto axes, Explicit axes + reshard and shard_map +
psum, on both backends, values equal to numpy's and placements equal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a fresh process importing JAX and torch: ~10 s alone

ROOT = Path(__file__).resolve().parents[1]


def test_megatron_three_ways_runs_and_agrees():
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "megatron_three_ways.py")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    for way in ("auto_axes", "explicit_axes", "with_shard_map"):
        assert f"{way}: spec (('data',), ()) on both backends, values equal" in out.stdout
