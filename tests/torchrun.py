"""Launch a worker script under torchrun with gloo ranks, for marked tests."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Callable

from subprocess_env import child_env

ROOT = Path(__file__).resolve().parents[1]


# torchrun's failure summary names each failed rank's exit code; a rank
# killed by SIGABRT (-6) or SIGSEGV (-11) crashed in native code.
_NATIVE_CRASH = re.compile(r"exitcode\s*:\s*-(6|11)\b")


def run_torchrun(
    script: str, nproc: int = 4, timeout: float = 180, args: tuple = (), env: dict | None = None,
    before_retry: Callable[[], None] | None = None,
) -> str:
    """Run ``tests/multiprocess/<script>`` on ``nproc`` local ranks; return its output.

    ``env`` adds variables to the ranks' environment. Raises ``AssertionError``
    with the output when any rank fails. A run in which a rank crashed in
    native code (SIGABRT or SIGSEGV: gloo's threads at shutdown, seen now and
    then on the loaded 2-core machine, pytorch#190489) is run once more, with
    a warning that names the crash; ``before_retry`` removes what the first
    run left (its result files). A second failure of any kind fails.
    """
    env = child_env(**(env or {}))
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc_per_node={nproc}", str(ROOT / "tests" / "multiprocess" / script), *args,
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    output = proc.stdout + proc.stderr
    crash = _NATIVE_CRASH.search(output) if proc.returncode != 0 else None
    if crash is not None:
        warnings.warn(f"{script}: a rank crashed with signal {crash.group(1)} "
                      f"(exit code -{crash.group(1)}); running it once more", stacklevel=2)
        if before_retry is not None:
            before_retry()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    return output
