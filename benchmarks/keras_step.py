"""A Keras training step under ``ModelParallel``: torch with parity against
the JAX backend, same model, same mesh (2 x 4: ``data`` x ``model``), same
batches. Each backend runs in its own process (``KERAS_BACKEND`` is per
process): ``python -m benchmarks.keras_step --backend torch|jax``, which
prints one JSON line with the median step time and, on torch, where the
time goes (``torch.profiler``, top ops by self CPU time).

JAX compiles the step (``jit_compile=True``, its default); torch runs it
eagerly (``jit_compile=False``: over simulated ranks parity's compiled
Keras step runs eagerly anyway), so the ratio is eager DTensor against
compiled XLA. The compiled Keras step on real gloo ranks is timed by
``benchmarks/keras_compiled_step.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import Row, median

ROOT = Path(__file__).resolve().parents[1]
DEVICES = 8
BATCH, FEATURES, HIDDEN, CLASSES = 64, 256, 512, 16


def _model(keras):
    inputs = keras.Input((FEATURES,))
    h = keras.layers.Dense(HIDDEN, activation="relu", name="dense_1")(inputs)
    h = keras.layers.Dense(HIDDEN, activation="relu", name="dense_2")(h)
    outputs = keras.layers.Dense(CLASSES, name="dense_out")(h)
    return keras.Model(inputs, outputs)


def child(backend: str, steps: int, warmup: int, profile: bool) -> dict:
    if backend == "jax":
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + f" --xla_force_host_platform_device_count={DEVICES}")
    os.environ["KERAS_BACKEND"] = backend
    import numpy as np

    import keras

    ctx = None
    if backend == "torch":
        import torch

        torch.set_num_threads(1)
        from parity import torch_impl

        torch_impl.install_keras()
        ctx = torch_impl.simulate(DEVICES)
        ctx.__enter__()
    try:
        from keras import distribution as kd

        mesh = kd.DeviceMesh((2, 4), ("data", "model"), kd.list_devices())
        layout_map = kd.LayoutMap(mesh)
        layout_map["dense_1/kernel"] = (None, "model")
        layout_map["dense_1/bias"] = ("model",)
        layout_map["dense_2/kernel"] = ("model", None)
        layout_map["dense_out/kernel"] = (None, None)
        kd.set_distribution(kd.ModelParallel(layout_map=layout_map, batch_dim_name="data"))
        model = _model(keras)
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse",
                      jit_compile=(backend == "jax"))
        rng = np.random.default_rng(0)
        x = rng.standard_normal((BATCH, FEATURES)).astype("float32")
        y = rng.standard_normal((BATCH, CLASSES)).astype("float32")
        for _ in range(warmup):
            model.train_on_batch(x, y)
        times, cpu = [], []
        for _ in range(steps):
            start, start_cpu = time.perf_counter(), time.thread_time()
            model.train_on_batch(x, y)
            times.append(time.perf_counter() - start)
            cpu.append(time.thread_time() - start_cpu)
        # CPU time of this thread: on a shared machine it leaves out the time
        # other processes hold the core (torch runs single-threaded here; JAX's
        # XLA threads make it meaningless for JAX, so it is shown for torch only).
        result = {"step_s": median(times), "step_cpu_s": median(cpu), "samples": len(times)}
        if profile and backend == "torch":
            import torch.profiler as tp

            with tp.profile(activities=[tp.ProfilerActivity.CPU]) as prof:
                for _ in range(3):
                    model.train_on_batch(x, y)
            avgs = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
            total = sum(e.self_cpu_time_total for e in avgs) or 1
            result["top_ops"] = [(e.key, round(e.self_cpu_time_total / total, 3)) for e in avgs[:5]]
            result["layers_ms"] = _layer_split(lambda: model.train_on_batch(x, y), 5)
        return result
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)


def _layer_split(step, steps: int) -> dict[str, float]:
    """CPU ms per ``step()`` spent inside each layer of the simulated step,
    outermost calls only: ``jax_semantics()``'s ``__torch_function__``
    (``parity_mode``), the simulator's ``__torch_dispatch__``
    (``simulator``) and, inside it, its per-rank op loop ``_each_rank``
    (``per_rank_ops``: the ops' kernels once per rank, their argument rows
    and result wrappers). The timers add their own Python to each call, so
    the step is slower while they run; the shares are what they show."""
    from parity.torch_impl.runtime.simulator import SimulatedRanksMode
    from parity.torch_impl.semantics.mode import _JaxSemanticsMode

    spent = {"parity_mode": 0, "simulator": 0, "per_rank_ops": 0}
    inside: set[str] = set()

    def timed(layer, original):
        def call(*args, **kwargs):
            if layer in inside:
                return original(*args, **kwargs)
            inside.add(layer)
            start = time.thread_time_ns()
            try:
                return original(*args, **kwargs)
            finally:
                spent[layer] += time.thread_time_ns() - start
                inside.discard(layer)
        return call

    patched = [(_JaxSemanticsMode, "__torch_function__", "parity_mode"),
               (SimulatedRanksMode, "__torch_dispatch__", "simulator"),
               (SimulatedRanksMode, "_each_rank", "per_rank_ops")]
    saved = [(cls, name, cls.__dict__[name]) for cls, name, _ in patched]
    for cls, name, layer in patched:
        setattr(cls, name, timed(layer, getattr(cls, name)))
    try:
        start = time.thread_time_ns()
        for _ in range(steps):
            step()
        total = time.thread_time_ns() - start
    finally:
        for cls, name, original in saved:
            setattr(cls, name, original)
    return {"step": total / steps / 1e6, **{k: v / steps / 1e6 for k, v in spent.items()}}


def _run_child(backend: str, steps: int, warmup: int, timeout: float) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.keras_step", "--backend", backend,
         "--steps", str(steps), "--warmup", str(warmup), "--profile"],
        env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"{backend} child failed: {tail[0][:200]}")
    return json.loads(lines[-1])


def run(cfg: dict) -> list[Row]:
    case = f"MLP {FEATURES}-{HIDDEN}-{HIDDEN}-{CLASSES}, batch {BATCH}, ModelParallel 2x4"
    import importlib.util

    missing = [m for m in ("keras", "jax") if importlib.util.find_spec(m) is None]
    if missing:  # (importing keras here would pick a backend for this process)
        return [Row("keras", case, status=f"not available: {', '.join(missing)} not installed")]
    try:
        torch_res = _run_child("torch", cfg["keras_steps"], 3, cfg["keras_timeout_s"])
        jax_res = _run_child("jax", cfg["keras_steps"], 3, cfg["keras_timeout_s"])
    except (RuntimeError, subprocess.TimeoutExpired) as err:  # a failed child: report it
        return [Row("keras", case, status=f"error: {err}"[:300])]
    where = ", ".join(f"{name} {share:.0%}" for name, share in torch_res.get("top_ops", []))
    layers = torch_res.get("layers_ms")
    split = "" if not layers else (
        f"; CPU per timed step {layers['step']:.1f} ms: inside jax_semantics()'s mode "
        f"{layers['parity_mode']:.1f}, inside the simulator {layers['simulator']:.1f}, "
        f"of which its per-rank op loop {layers['per_rank_ops']:.1f}")
    return [Row("keras", f"train step: {case}", torch_res["step_s"], jax_res["step_s"],
                note=f"vs JAX backend (jit); torch eager, "
                     f"{torch_res['step_cpu_s'] * 1e3:.1f} ms CPU per step; torch time goes to: {where}"
                     f"{split}")]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--backend", choices=["torch", "jax"], required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--profile", action="store_true")
    a = p.parse_args()
    print(json.dumps(child(a.backend, a.steps, a.warmup, a.profile)), flush=True)


if __name__ == "__main__":
    main()
