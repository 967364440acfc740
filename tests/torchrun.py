"""Launch a worker script under torchrun with gloo ranks, for marked tests."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

from subprocess_env import child_env

ROOT = Path(__file__).resolve().parents[1]


def run_torchrun(
    script: str, nproc: int = 4, timeout: float = 180, args: tuple = (), env: dict | None = None,
) -> str:
    """Run ``tests/multiprocess/<script>`` on ``nproc`` local ranks; return its output.

    ``env`` adds variables to the ranks' environment. Raises ``AssertionError``
    with the output when any rank fails, a rank that crashed at exit
    included: nothing is run twice (a user's job has no retry either).
    """
    env = child_env(**(env or {}))
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc_per_node={nproc}", str(ROOT / "tests" / "multiprocess" / script), *args,
    ]
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=timeout)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, failure_text(output, 12000)
    return output


def failure_text(output: str, tail: int) -> str:
    """What a failed job's assertion shows: the fault handler's report of
    every rank that died of a signal ("Fatal Python error: Segmentation
    fault" and each thread's Python stack; ``child_env`` turns it on), then
    the last ``tail`` characters. The other ranks' tracebacks ("lost rank
    0") fill the tail, so a crashed rank's own stack would be cut off."""
    lines = output.splitlines()
    crashes, keep = [], 0
    for line in lines:
        if "Fatal Python error" in line:
            keep = 60  # the error, the current thread's stack, the others'
        if keep:
            crashes.append(line)
            keep -= 1
    head = "\n".join(crashes)
    return (f"crashed ranks:\n{head}\n...\n" if head else "") + output[-tail:]


def children_cpu_seconds() -> float:
    """User + system CPU seconds of this process's finished children (a
    torchrun job's ranks included, once it has exited): what a job costs,
    whatever else is loading the machine."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
