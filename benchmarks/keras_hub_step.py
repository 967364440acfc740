"""A keras-hub model's training step on 8 simulated ranks against the JAX
backend on 8 host CPU devices (issue 24, items 4 and 5).

The model is the keras-hub test's (``tests/keras_support/hub_driver.py``):
a tiny random ``GemmaCausalLM`` (2 layers, hidden 16, 8 heads, vocabulary
64, batch 8 x 8 tokens) under its own ``get_layout_map`` on the (2, 4)
``batch, model`` mesh, ``fit`` with Adam. torch with parity runs it eagerly
on 8 simulated ranks (``torch_impl.simulate(8)``: every op once per rank in
one process), JAX jits it on 8 host devices
(``--xla_force_host_platform_device_count=8``, XLA's default optimisation).
The figure is the median ``fit`` step after the first (each side's warm-up:
JAX compiles there). keras-hub lives in the ``.keras-hub`` overlay
(``bash scripts/keras_hub.sh`` installs it); without it the row says so.

    python -m benchmarks.keras_hub_step [--steps 4]      # prints the row as JSON
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.common import Row, median

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "keras_support" / "hub_driver.py"
OVERLAY = ROOT / ".keras-hub"
CONFIG = "gemma:2x4"


def _env(backend: str) -> dict[str, str]:
    path = [str(ROOT)] + ([str(OVERLAY)] if OVERLAY.is_dir() else [])
    env = dict(os.environ, KERAS_BACKEND=backend, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(path + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def keras_hub_missing() -> str | None:
    """Why keras-hub cannot be imported by the driver, or ``None``."""
    proc = subprocess.run([sys.executable, "-c", "import keras_hub"], env=_env("jax"),
                          capture_output=True, text=True, cwd=ROOT)
    if proc.returncode == 0:
        return None
    return f"keras-hub not importable ({proc.stderr.strip().splitlines()[-1][:120]}): bash scripts/keras_hub.sh"


def step_seconds(backend: str, config: str, steps: int, timeout: float) -> list[float]:
    """Each ``fit`` step's wall seconds from the driver on ``backend``.
    Raises ``RuntimeError`` with the driver's log tail when it fails."""
    proc = subprocess.run([sys.executable, str(DRIVER), "--configs", config, "--steps", str(steps)],
                          env=_env(backend), capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("HUB_RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{backend} driver failed: {(proc.stderr or proc.stdout)[-300:]}")
    return json.loads(lines[-1][len("HUB_RESULT "):])["step_seconds"]


def run(cfg: dict) -> list[Row]:
    """One row: parity's simulated step against JAX's jitted one (JAX first,
    alone: XLA:CPU aborts a collective whose device threads a busy
    neighbour starves for 40 s)."""
    case = f"keras-hub {CONFIG} fit step, 8 simulated ranks (torch eager) vs 8 host devices (JAX jit)"
    missing = keras_hub_missing()
    if missing:
        return [Row("keras_hub", case, status=f"not available: {missing}")]
    steps, timeout = cfg.get("hub_steps", 4), cfg.get("hub_timeout_s", 900)
    try:
        jax = step_seconds("jax", CONFIG, steps, timeout)
        torch = step_seconds("torch", CONFIG, steps, timeout)
    except (RuntimeError, subprocess.TimeoutExpired) as err:
        return [Row("keras_hub", case, status=f"error: {err}"[:300])]
    return [Row("keras_hub", case, median(torch[1:]), median(jax[1:]),
                note=f"median of {steps - 1} steps after the first; first step torch "
                     f"{torch[0]:.1f} s, JAX {jax[0]:.1f} s (compile)")]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    a = p.parse_args()
    for row in run({"hub_steps": a.steps}):
        print(json.dumps(row.as_json()))


if __name__ == "__main__":
    main()
