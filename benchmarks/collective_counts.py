"""Collectives per training step: parity's launches against the collectives
in JAX's compiled HLO for the same step, mesh and layouts (issue 24, item 5).

The counts come from the workers ``tests/test_collective_counts.py`` pins:
parity's side from ``tests/multiprocess/collective_count_worker.py`` (the
tensor-parallel MLP, mesh (2, 2) ``batch, model``, 4 gloo ranks, eager
(under ``jax_semantics()`` and ``jax_semantics(defer=True)``), under
``torch.compile(backend="aot_eager")``, under parity's
``aot_eager_bucketed`` and under ``torch.compile(step)`` with no backend
named -- inductor, whose all-reduce bucketing ``jax_semantics()`` turns on) and
``keras_collective_count_worker.py`` (the Keras parity driver's MLP and transformer block on mesh
(1, 2), 2 gloo ranks, eager ``train_on_batch``), counted from the profiler's
process-group events; JAX's side from that test file run as a script (the
HLO of ``jax.jit`` of the same step on simulated CPU devices; for Keras,
XLA's dump of the JAX backend's jitted train step). The figure is launches
(one combined all-reduce carrying several arrays counts once, as XLA
launches it); the goal is JAX's count.

    python -m benchmarks.collective_counts      # prints the rows as JSON lines
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import Row

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
COUNTS_SCRIPT = TESTS / "test_collective_counts.py"
KERAS_MODELS = ("mlp", "transformer")
# the worker's runs of the TP MLP on (2, 2) -> the row's words
MLP_RUNS = {"eager": "eager (pending sums deferred, the default)",
            "eager at once": "eager under jax_semantics(defer=False)",
            "compiled": "compiled (aot_eager)",
            "compiled bucketed": "compiled (parity's aot_eager_bucketed)",
            "compiled default": "compiled (torch.compile(step): inductor)"}


class CountRunFailed(RuntimeError):
    """A counting child process failed; ``command`` is what ran, ``output`` its log tail."""

    def __init__(self, command: list[str], output: str) -> None:
        self.command = command
        self.output = output
        super().__init__(f"{' '.join(command[1:4])} ... failed: {output[-300:]}")


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **extra)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> str:
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise CountRunFailed(cmd, proc.stdout + proc.stderr)
    return proc.stdout


def launches(counts: dict) -> int:
    """Launches in ``{kind: n}`` (parity's) or ``{kind: {"launches": n, ...}}`` (the HLO's)."""
    return sum(v["launches"] if isinstance(v, dict) else v for v in counts.values())


def parity_counts(worker: str, nproc: int, args: tuple[str, ...], timeout: float) -> dict:
    """What rank 0 of ``tests/multiprocess/<worker>`` on ``nproc`` gloo ranks reports."""
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        _run([sys.executable, "-m", "torch.distributed.run", "--standalone",
              f"--nproc_per_node={nproc}", str(TESTS / "multiprocess" / worker), *args],
             _env(PARITY_RESULT_FILE=str(result)), timeout)
        return json.loads(result.read_text())


def jax_counts(args: tuple[str, ...], devices: int, timeout: float, dump: str | None = None) -> dict:
    """The HLO collectives ``tests/test_collective_counts.py`` (run as a script) reports."""
    flags = f"--xla_force_host_platform_device_count={devices}"
    extra = {"JAX_PLATFORMS": "cpu"}
    if dump is not None:  # the Keras step: read from XLA's dump of the optimized module
        flags += f" --xla_dump_to={dump} --xla_dump_hlo_as_text"
        extra.update(KERAS_BACKEND="jax", PARITY_XLA_DUMP=dump)
    out = _run([sys.executable, str(COUNTS_SCRIPT), *args], _env(XLA_FLAGS=flags, **extra), timeout)
    return json.loads(out.strip().splitlines()[-1])


def _row(case: str, parity: dict, jax: dict, backward: dict | None = None) -> Row:
    """``backward``: parity's launches inside ``backward()`` (the gradients'), where counted."""
    inside = "" if backward is None else f" ({launches(backward)} inside backward())"
    return Row("collective_counts", case, launches(parity), launches(jax), unit="n", goal=1.0,
               note=f"parity {parity}{inside}; JAX HLO {jax}")


def run(cfg: dict) -> list[Row]:
    """The rows: TP MLP on (2, 2) eager and compiled three ways, the Keras MLP and transformer block on (1, 2).
    JAX's children run before the gloo ranks, never beside them (XLA:CPU
    aborts a collective whose device threads are starved for 40 s)."""
    timeout = cfg.get("counts_timeout_s", 600)
    rows: list[Row] = []
    try:
        jax_mlp = jax_counts(("2d",), 4, timeout)
        mlp = parity_counts("collective_count_worker.py", 4, ("2d",), timeout)
        for run_name, label in MLP_RUNS.items():
            rows.append(_row(f"TP MLP step, mesh (2, 2), 4 gloo ranks, {label}: "
                             "launches vs JAX's HLO", mlp[run_name], jax_mlp,
                             mlp.get(run_name + " in backward")))
    except (CountRunFailed, subprocess.TimeoutExpired) as err:
        rows.append(Row("collective_counts", "TP MLP step, mesh (2, 2)", status=f"error: {err}"[:300]))
    try:
        with tempfile.TemporaryDirectory() as dump:
            jax_keras = jax_counts(("keras", *KERAS_MODELS), 2, timeout, dump)
        keras = parity_counts("keras_collective_count_worker.py", 2, KERAS_MODELS, timeout)
        for model in KERAS_MODELS:
            rows.append(_row(f"Keras {model} train_on_batch, mesh (1, 2), 2 gloo ranks, eager: "
                             "launches vs JAX's HLO", keras[model], jax_keras[model]))
    except (CountRunFailed, subprocess.TimeoutExpired) as err:
        rows.append(Row("collective_counts", "Keras train_on_batch, mesh (1, 2)",
                        status=f"error: {err}"[:300]))
    return rows


def main() -> None:
    for row in run({}):
        print(json.dumps(row.as_json()), flush=True)


if __name__ == "__main__":
    main()
