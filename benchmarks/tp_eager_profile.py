"""Where the eager tensor-parallel MLP step's CPU time goes on 2 gloo ranks,
against plain DTensor and JAX.

The model and step are ``benchmarks/compiled_step.py``'s (x replicated, w1
column-parallel, w2 row-parallel on ``model``, ``mean((tanh(x @ w1) @ w2 -
1) ** 2)``, ``loss.backward()``, SGD), eager, on 2 gloo ranks started by
torchrun, one thread each. Each round runs, one after the other (never side
by side): parity's step under ``jax_semantics()``, the same step on plain
DTensor (the same values: the floor of any design built on eager DTensor),
and ``jax.jit`` of it on 2 JAX processes over gloo; per side the process's
CPU time per step (all threads) and the median wall time, rank 0's. On a
machine shared with other jobs the wall time holds the time others held the
cores (and, for torch, gloo's hand-offs between its worker thread and the
caller, each a wake-up that waits for a core); the CPU time does not.
Rounds are paired: compare sides within a round.

After the rounds, one profiled run of parity's step: cProfile timed by the
main thread's CPU (``time.thread_time``), self time grouped by where the
Python lives (``keras_eager_profile``'s groups) -- shares, cProfile slows
Python down.

    python -m benchmarks.tp_eager_profile [--rounds 3] [--steps 50] [--results FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import load_average

ROOT = Path(__file__).resolve().parents[1]
WORLD = 2


def torch_rank(side: str, steps: int, profile: bool, out: str) -> None:
    """One gloo rank: CPU and median wall time per eager step of ``side``
    (``parity`` or ``plain``); with ``profile``, cProfile's account too."""
    import torch

    import parity
    from benchmarks import keras_eager_profile as kep
    from benchmarks.compiled_step import BATCH, FEATURES, HIDDEN, OUT, _median_step, host, sgd_step
    from parity import torch_impl as ti

    torch.set_num_threads(1)
    ti.initialize()
    mesh = parity.DeviceMesh((WORLD,), ("model",))
    L = parity.TensorLayout
    x = ti.distribute_tensor(host((BATCH, FEATURES), 0), L((None, None), mesh))
    w1 = ti.distribute_variable(host((FEATURES, HIDDEN), 1), L((None, "model"), mesh))
    w2 = ti.distribute_variable(host((HIDDEN, OUT), 2), L(("model", None), mesh))

    def step():
        return sgd_step(x, w1, w2)

    scope = ti.jax_semantics() if side == "parity" else contextlib.nullcontext()
    with scope:
        result = _median_step(step, steps, warmup=5)
        if profile:
            result["cprofile"] = kep._cprofile_account(step, steps, None)
        result["loss"] = float(step().full_tensor())
    if ti.process_id() == 0:
        Path(out).write_text(json.dumps(result))


def _ranks(side: str, steps: int, profile: bool, env: dict, tmp: str) -> dict:
    out = str(Path(tmp) / f"{side}.json")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc_per_node={WORLD}", "-m", "benchmarks.tp_eager_profile",
                           "--role", "torch", "--side", side, "--steps", str(steps), "--out", out,
                           *(["--profile"] if profile else [])],
                          env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{side} ranks failed:\n{(proc.stdout + proc.stderr)[-6000:]}")
    return json.loads(Path(out).read_text())


def measurement(summary: dict) -> dict:
    """The run as a ``parity.measurement/1`` results file (``scripts/measurements.py``
    renders it into benchmarks/README.md)."""
    import datetime

    from benchmarks.common import machine, provenance

    info = machine()
    rows = []
    for i, r in enumerate(summary["rounds"], 1):
        jax = r["jax"]["cpu_s"]
        rows.append([f"round {i} (load {r['load']}): CPU per step",
                     *(f"{r[s]['cpu_s'] * 1e3:.2f} ms ({r[s]['cpu_s'] / jax:.2f}x)"
                       for s in ("parity", "plain", "jax"))])
        rows.append([f"round {i}: median wall per step",
                     *(f"{r[s]['step_s'] * 1e3:.2f} ms" for s in ("parity", "plain", "jax"))])
    groups = summary["profile"]["python_self_ms"]
    total = sum(groups.values()) or 1.0
    for group, ms in groups.items():
        rows.append([f"parity's step, profiled: self CPU in {group} (cProfile share)",
                     f"{100 * ms / total:.0f}%", "", ""])
    prov = provenance(summary["command"])
    return {
        "schema": "parity.measurement/1", "page": "benchmarks/README.md", "order": 44,
        "title": "The eager tensor-parallel MLP step's CPU time on 2 gloo ranks",
        "date": prov["date"] or datetime.date.today().isoformat(), "commit": prov["commit"],
        "commit_note": "the commit the profile ran on",
        "machine": (f"{info['cpu']}, {info['affinity_cpus']} CPUs, Python {info['python']}, torch "
                    f"{info['torch']}, jax {info['jax']}; a machine shared with other jobs: load "
                    f"{summary['load']} (1, 5, 15 min averages, before -> after)"),
        "command": summary["command"], "source": "this run (benchmarks/tp_eager_profile.py)",
        "text": (f"TP MLP 256-512-16, batch 64, mesh (2,) `model`, eager step (forward, "
                 f"`loss.backward()`, SGD), rank 0, {summary['steps']} steps per side after 5 "
                 "warm-up steps; the ratio is against JAX's CPU time in the same round. Each "
                 "side's CPU time is its process's (all threads); cProfile's shares are of the "
                 "main thread's CPU."),
        "columns": ["per step", "parity (jax_semantics)", "plain DTensor", "JAX jit, 2 gloo processes"],
        "rows": rows,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--role", choices=["main", "torch", "jax-process"], default="main")
    p.add_argument("--side", choices=["parity", "plain"])
    p.add_argument("--profile", action="store_true")
    p.add_argument("--out")
    p.add_argument("--results", help="also write the account as a results file (docs/results/*.json)")
    a = p.parse_args()
    if a.role == "torch":
        return torch_rank(a.side, a.steps, a.profile, a.out)
    from benchmarks.compiled_step import _jax_processes

    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    load_before = load_average()
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.rounds):
            r = {"load": load_average()}
            for side in ("parity", "plain"):
                r[side] = _ranks(side, a.steps, False, env, tmp)
            r["jax"] = _jax_processes(WORLD, a.steps, 5, env, tmp)
            rounds.append(r)
            print(json.dumps(r), flush=True)
        profile = _ranks("parity", a.steps, True, env, tmp)["cprofile"]
    command = "python -m benchmarks.tp_eager_profile" + (
        f" --rounds {a.rounds}" if a.rounds != 3 else "") + (f" --steps {a.steps}" if a.steps != 50 else "")
    summary = {"steps": a.steps, "load": f"{load_before} -> {load_average()}", "command": command,
               "rounds": rounds, "profile": profile}
    print(json.dumps({"python_self_ms": profile["python_self_ms"], "top": profile["top"][:15]}))
    if a.results:
        Path(a.results).write_text(json.dumps(measurement(summary), indent=1) + "\n")
        print(f"wrote {a.results}")


if __name__ == "__main__":
    main()
