"""A rank that dies of a signal shows its own Python stack in the failed
test's message: ``torchrun.failure_text`` puts the fault handler's report
first, ahead of the other ranks' "lost rank" tracebacks that fill the tail
(CI once showed only those for a rank killed by SIGSEGV)."""

from __future__ import annotations

import subprocess
import sys

from subprocess_env import child_env
from torchrun import failure_text

CRASH = "import ctypes\ndef crash_in_rank_zero():\n    ctypes.string_at(0)\ncrash_in_rank_zero()\n"


def test_a_crashed_process_stack_comes_before_the_noise():
    proc = subprocess.run([sys.executable, "-c", CRASH], env=child_env(), capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode != 0
    noise = "[rank2]: parity.errors.LostRankError: lost rank 0 of 4\n" * 500
    text = failure_text(proc.stderr + noise, 6000)
    report = text[: text.index("...\n")]
    assert "Fatal Python error: Segmentation fault" in report
    assert "crash_in_rank_zero" in report
    assert text.endswith(noise[-6000:])


def test_a_job_that_did_not_crash_shows_only_its_tail():
    assert failure_text("x" * 100 + "the end", 7) == "the end"
