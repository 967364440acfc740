"""The environment of the processes tests start (drivers, torchrun workers):
this checkout first on ``PYTHONPATH``, *ahead of* what the caller had there,
not instead of it. ``scripts/keras_versions.sh`` puts the next Keras on
``PYTHONPATH``; a child that dropped it would quietly test the installed
Keras instead.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child_env(**extra: str) -> dict[str, str]:
    """``os.environ`` with ROOT prepended to ``PYTHONPATH``, one OpenMP
    thread per process (the tests start several on 2 cores), Python's fault
    handler on (a rank that dies of a signal prints every thread's Python
    stack into the output the test shows), then ``extra``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"
    env.update(extra)
    return env
