"""What turning on ``jit_compile`` costs a Keras user on real ranks: the
whole training job with ``jit_compile=True`` against the same job eager
(issue 24, item 1: at most 1.3x).

The job is the Keras parity driver's MLP (``tests/keras_support/
parity_driver.py``, ``mlp:mp``: mesh (1, 2) ``batch, model``, the driver's
layouts, Adam) trained by ``fit`` over ``STEPS`` batches on 2 gloo ranks
started by ``torchrun``, timed from the launch to the last rank's exit
(imports, model building and Keras's first compiled step included, as a
user's job pays them). The eager and compiled jobs alternate (eager,
compiled, eager, compiled) so that load on a shared machine hits both;
each side's faster job counts. The baseline is parity's own eager job:
JAX is not in this row.

    python -m benchmarks.keras_job [--steps 12] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import Row, load_average

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "keras_support" / "parity_driver.py"
WORLD = 2
STEPS = 12
GOAL = 1.3  # issue 24: a job with jit_compile=True takes at most 1.3x the eager job


class KerasJobFailed(RuntimeError):
    """A timed job exited with an error; carries the command and its output's tail."""

    def __init__(self, command: list[str], output: str) -> None:
        super().__init__(f"{' '.join(command[-6:])} failed: {output.strip()[-300:]}")
        self.command, self.output = command, output


def job_seconds(jit: bool, steps: int, timeout: float = 900) -> float:
    """Wall seconds of one ``torchrun`` job of the driver's ``mlp:mp`` ``fit``.
    Raises ``KerasJobFailed`` when the job fails."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={WORLD}", str(DRIVER), "--configs", "mlp:mp", "--torchrun",
           "--steps", str(steps), "--fit-only", *(["--jit"] if jit else [])]
    env = dict(os.environ, KERAS_BACKEND="torch", PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise KerasJobFailed(cmd, proc.stdout + proc.stderr)
    return seconds


def measure(steps: int = STEPS, rounds: int = 2) -> dict:
    """Each side's job seconds over ``rounds`` alternating rounds, and the load."""
    load_before = load_average()
    eager, compiled = [], []
    for _ in range(rounds):
        eager.append(job_seconds(False, steps))
        compiled.append(job_seconds(True, steps))
    return {"steps": steps, "eager_s": eager, "compiled_s": compiled,
            "load_before": load_before, "load_after": load_average()}


def rows(cfg: dict) -> list[Row]:
    """The ``keras_job`` row of ``python -m benchmarks``; a failed job is an error row."""
    steps = cfg.get("job_steps", STEPS)
    case = (f"Keras MLP (mlp:mp) fit, {steps} batches, {WORLD} gloo ranks, whole torchrun job: "
            "jit_compile=True vs eager")
    try:
        found = measure(steps, cfg.get("job_rounds", 2))
    except (KerasJobFailed, subprocess.TimeoutExpired) as err:
        return [Row("keras_job", case, status=f"error: {err}"[:300])]
    note = (f"the faster of {len(found['eager_s'])} jobs each, alternating; eager jobs "
            f"{', '.join(f'{s:.1f}' for s in found['eager_s'])} s, compiled jobs "
            f"{', '.join(f'{s:.1f}' for s in found['compiled_s'])} s; baseline: parity's eager "
            f"job; load {found['load_before']} -> {found['load_after']}")
    return [Row("keras_job", case, min(found["compiled_s"]), min(found["eager_s"]), goal=GOAL,
                note=note)]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=STEPS)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    for row in rows({"job_steps": a.steps, "job_rounds": a.rounds}):
        print(json.dumps(row.as_json()), flush=True)


if __name__ == "__main__":
    main()
