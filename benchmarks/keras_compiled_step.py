"""A Keras ``ModelParallel`` training step on 2 gloo ranks: parity's
``jit_compile=True`` step against the eager one and against the JAX
backend's ``jit`` step, on 2 CPU devices of one process and on 2 JAX
processes with one CPU device each and gloo collectives (the torch ranks'
terms) -- ratios from one run (issue 15, item 5).

    python -m benchmarks.keras_compiled_step [--models mlp,transformer]
        [--steps 20] [--warmup 3] [--backend inductor] [--profile]

Models, mesh and layouts are the Keras parity tests' (``tests/keras_support/
parity_driver.py``, ``mlp:mp`` and ``transformer:mp`` on 2 devices: mesh
(1, 2) ``batch, model``, Megatron column/row-parallel kernels, the
``.*dense.*output`` layouts included), global batch 16, Adam.
Each figure is rank 0's median ``train_on_batch`` after warm-up (the first
compiled call, timed apart, is in the warm-up). torch: one thread per rank;
JAX: one process with 2 CPU devices (``OMP_NUM_THREADS=1``; XLA's CPU
client may still use more threads -- the machine's cores are the budget),
and 2 processes (``keras.distribution.initialize``, one device each, the
same per-process batches as the torch ranks).

``--backend`` is the ``torch.compile`` backend Keras's compiled steps get
(Keras passes torch's default, ``inductor``). ``--profile`` adds, for the
compiled step, where rank 0's time goes: ``torch.profiler`` events grouped
(compiled regions, the untraced backward, parity's dispatch,
redistributions, gloo collectives and waits) and cProfile's top functions by
cumulative time. Prints one JSON line per model, then a table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from benchmarks.common import Row, load_average

ROOT = Path(__file__).resolve().parents[1]
DRIVER_DIR = ROOT / "tests" / "keras_support"
WORLD = 2
GLOBAL_BATCH = 16


def _driver():
    sys.path.insert(0, str(DRIVER_DIR))
    import parity_driver

    return parity_driver


def _model_and_batch(driver, keras, model: str, jit: bool, rank: int, n_processes: int,
                     torchrun: bool, output_layouts: bool = True):
    """The driver's model under its distribution (built, weights set) and
    this process's slice of one global batch; ``output_layouts=False``
    drops the driver's ``.*dense.*output`` entry."""
    import numpy as np

    args = SimpleNamespace(model=model, dist="mp", jit=jit, torchrun=torchrun, steps=1,
                           devices=WORLD)
    keras.utils.set_random_seed(0)
    distribution = driver.make_distribution(args, keras, WORLD)
    layout_map = getattr(distribution, "_layout_map", None)
    if not output_layouts and layout_map is not None and ".*dense.*output" in layout_map:
        del layout_map[".*dense.*output"]
    x, y = driver.make_data(args, 1, GLOBAL_BATCH)
    with distribution.scope():
        m = driver.build_model(args, keras)
        # the driver's initial_weights, reading shapes, not values (a JAX
        # process cannot fetch a sharded weight's global value)
        rng = np.random.default_rng(1)
        m.set_weights([(rng.normal(size=w.shape) * 0.2).astype(w.dtype) for w in m.weights])
    if torchrun:
        rows = driver.process_rows(args, WORLD, n_processes, rank, GLOBAL_BATCH)
        x, y = x[rows], y[rows]
    return distribution, m, np.asarray(x), np.asarray(y)


def _loss(logs) -> float:
    """The loss of ``train_on_batch``'s result (a list when the model has metrics)."""
    return float(logs[0] if isinstance(logs, (list, tuple)) else logs)


def _time_steps(step, steps: int, warmup: int) -> dict:
    start = time.perf_counter()
    step()
    first = time.perf_counter() - start
    for _ in range(warmup):
        step()
    times = []
    cpu_start = time.process_time()
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    cpu = (time.process_time() - cpu_start) / steps  # this process's CPU, all threads
    times.sort()
    return {"step_s": times[len(times) // 2], "first_call_s": first,
            "min_s": times[0], "max_s": times[-1], "cpu_s": cpu}


def _eager_dispatch(step, n: int) -> dict:
    """Calls that reach parity's eager rule (``semantics.mode._eager``: not
    traced by dynamo, not on the fast path) over ``n`` steps: per op name,
    calls and inclusive ms per step (outermost calls only), split by
    whether the autograd engine was running (backward) or not."""
    import torch

    from parity.torch_impl.semantics import mode

    original = mode._eager
    depth = [0]
    seen: dict = {}

    def counted(func, args, kwargs, key):
        if depth[0]:
            return original(func, args, kwargs, key)
        depth[0] += 1
        start = time.perf_counter()
        try:
            return original(func, args, kwargs, key)
        finally:
            depth[0] -= 1
            where = "backward" if torch._C._current_graph_task_id() != -1 else "forward"
            entry = seen.setdefault((where, getattr(func, "__name__", str(func))), [0, 0.0])
            entry[0] += 1
            entry[1] += time.perf_counter() - start

    mode._eager = counted
    try:
        for _ in range(n):
            step()
    finally:
        mode._eager = original
    rows = sorted(((w, name, c / n, t / n * 1e3) for (w, name), (c, t) in seen.items()),
                  key=lambda r: -r[3])
    return {"total_ms_per_step": round(sum(r[3] for r in rows), 3),
            "calls_per_step": sum(r[2] for r in rows),
            "by_op": [(w, name, round(c, 1), round(ms, 3)) for w, name, c, ms in rows[:25]]}


def _profile(step, n: int, rank: int) -> dict:
    """Where rank 0's time goes over ``n`` steps: torch.profiler's totals
    for the labelled regions (inclusive) and the ops (self), and cProfile's
    top functions by cumulative time."""
    import cProfile
    import io
    import pstats

    import torch.profiler as tp

    with tp.profile(activities=[tp.ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(n):
            step()
        wall = (time.perf_counter() - start) / n
    events = prof.key_averages()
    per = 1e3 / n
    inclusive = {e.key: round(e.cpu_time_total / 1e3 * per / 1e3, 3) for e in events
                 if any(k in e.key for k in ("Torch-Compiled Region", "CompiledFunction",
                                              "autograd::engine", "c10d::", "redistribute",
                                              "ProfilerStep", "wait"))}
    self_ms = sorted(((e.key, e.self_cpu_time_total / 1e3 / n, e.count / n) for e in events),
                     key=lambda t: -t[1])
    top_self = [(k, round(ms, 3), round(c, 1)) for k, ms, c in self_ms[:15]]
    ops_per_step = sum(e.count for e in events if e.key.startswith("aten::")) / n
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(n):
        step()
    profiler.disable()
    buf = io.StringIO()
    stats = pstats.Stats(profiler, stream=buf)
    stats.sort_stats("cumulative").print_stats(40)
    rows = []
    for (file, line, fn), (cc, nc, tt, ct, _) in stats.stats.items():
        rows.append((ct / n * 1e3, tt / n * 1e3, nc / n, f"{Path(file).name}:{line}:{fn}"))
    rows.sort(reverse=True)
    by_self = sorted(rows, key=lambda r: -r[1])
    return {"wall_ms_per_step": round(wall * 1e3, 3),
            "parity_eager_dispatch": _eager_dispatch(step, n),
            "profiler_inclusive_ms_per_step": inclusive,
            "profiler_top_self_ms_per_step": top_self,
            "aten_ops_per_step": ops_per_step,
            "cprofile_top_cumulative_ms": [(round(c, 3), round(nc, 1), name)
                                           for c, _, nc, name in rows[:40]],
            "cprofile_top_self_ms": [(round(t, 3), round(nc, 1), name)
                                     for _, t, nc, name in by_self[:25]]}


def torch_rank(models: list[str], steps: int, warmup: int, backend: str, profile: bool,
               out: str, output_layouts: bool) -> None:
    os.environ["KERAS_BACKEND"] = "torch"
    import torch

    torch.set_num_threads(1)
    compile_fn = torch.compile

    def compile_with_backend(fn=None, **kwargs):  # Keras calls torch.compile(step)
        kwargs.setdefault("backend", backend)
        return compile_fn(fn, **kwargs)

    torch.compile = compile_with_backend
    from parity import torch_impl

    torch_impl.install_keras()
    import keras
    from keras.src.distribution import distribution_lib as kdl

    keras.distribution.initialize()
    driver = _driver()
    rank, n = kdl.distribution_lib.process_id(), kdl.distribution_lib.num_processes()
    result = {}
    for model in models:
        result[model] = {}
        for name, jit in (("eager", False), ("compiled", True)):
            torch._dynamo.reset()
            distribution, m, x, y = _model_and_batch(driver, keras, model, jit, rank, n, True,
                                                       output_layouts)
            with distribution.scope():
                def step():
                    return m.train_on_batch(x, y)

                result[model][name] = _time_steps(step, steps, warmup)
                result[model][name]["loss"] = _loss(step())
                if profile and jit:
                    result[model]["profile"] = _profile(step, 5, rank)
    if rank == 0:
        Path(out).write_text(json.dumps(result))


def jax_child(models: list[str], steps: int, warmup: int, output_layouts: bool) -> dict:
    os.environ["KERAS_BACKEND"] = "jax"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + f" --xla_force_host_platform_device_count={WORLD}")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import keras

    driver = _driver()
    result = {}
    for model in models:
        distribution, m, x, y = _model_and_batch(driver, keras, model, True, 0, 1, False,
                                               output_layouts)
        with distribution.scope():
            def step():
                return m.train_on_batch(x, y)

            result[model] = _time_steps(step, steps, warmup)
            result[model]["loss"] = _loss(step())
    return result


def jax_process(models: list[str], steps: int, warmup: int, output_layouts: bool,
                process_id: int, port: int, out: str) -> None:
    """One of ``WORLD`` JAX processes, one CPU device each, collectives over
    gloo (``jax_cpu_collectives_implementation``): the JAX step on the
    torch ranks' terms (rank 0 writes the times)."""
    os.environ["KERAS_BACKEND"] = "jax"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    import keras

    keras.distribution.initialize(f"127.0.0.1:{port}", WORLD, process_id)
    driver = _driver()
    result = {}
    for model in models:
        distribution, m, x, y = _model_and_batch(driver, keras, model, True, process_id, WORLD,
                                                 True, output_layouts)
        with distribution.scope():
            def step():
                return m.train_on_batch(x, y)

            result[model] = _time_steps(step, steps, warmup)
            result[model]["loss"] = _loss(step())
    if process_id == 0:
        Path(out).write_text(json.dumps(result))


def _run_jax_processes(a, extra: list[str], env: dict) -> dict:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "jax.json")
        procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.keras_compiled_step",
                                   "--role", "jax-process", "--process-id", str(i),
                                   "--port", str(port), "--models", a.models,
                                   "--steps", str(a.steps), "--warmup", str(a.warmup),
                                   "--out", out, *extra],
                                  env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
                 for i in range(WORLD)]
        logs = [proc.communicate()[0] for proc in procs]
        if any(proc.returncode for proc in procs):
            raise KerasStepFailed("JAX processes", "\n".join(log[-3000:] for log in logs))
        return json.loads(Path(out).read_text())


class KerasStepFailed(RuntimeError):
    """The torch ranks or a JAX side failed; ``output`` is the log tail."""

    def __init__(self, who: str, output: str) -> None:
        self.who = who
        self.output = output
        super().__init__(f"{who} failed:\n{output}")


def measure(models: list[str], steps: int, warmup: int, backend: str, profile: bool = False,
            output_layouts: bool = True) -> list[dict]:
    """Per model, the median eager and compiled ``train_on_batch`` on
    ``WORLD`` gloo ranks, JAX's jitted step in one process and on ``WORLD``
    gloo processes, their ratios, losses and the load; one after the other,
    never side by side. Raises ``KerasStepFailed`` when a side fails."""
    extra = [] if output_layouts else ["--no-output-layouts"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    load_before = load_average()
    a = SimpleNamespace(models=",".join(models), steps=steps, warmup=warmup)
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "torch.json")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={WORLD}", "-m", "benchmarks.keras_compiled_step",
               "--role", "torch", "--models", a.models, "--steps", str(a.steps),
               "--warmup", str(a.warmup), "--backend", backend, "--out", out, *extra]
        if profile:
            cmd.append("--profile")
        proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            raise KerasStepFailed("torch ranks", (proc.stdout + proc.stderr)[-6000:])
        torch_res = json.loads(Path(out).read_text())
    jax_proc = subprocess.run([sys.executable, "-m", "benchmarks.keras_compiled_step",
                               "--role", "jax", "--models", a.models, "--steps", str(a.steps),
                               "--warmup", str(a.warmup), *extra],
                              env=env, cwd=ROOT, capture_output=True, text=True)
    if jax_proc.returncode != 0:
        raise KerasStepFailed("JAX child", jax_proc.stderr[-6000:])
    jax_res = json.loads(jax_proc.stdout.strip().splitlines()[-1])
    jax_mp = _run_jax_processes(a, extra, env)
    load_after = load_average()
    rows = []
    for model in models:
        eager, compiled = torch_res[model]["eager"], torch_res[model]["compiled"]
        jitted, jitted_mp = jax_res[model], jax_mp[model]
        summary = {"model": model, "world": WORLD, "backend": backend,
                   "output_layouts": output_layouts,
                   "eager_s": eager["step_s"], "compiled_s": compiled["step_s"],
                   "jax_jit_s": jitted["step_s"],
                   "compiled_over_eager": compiled["step_s"] / eager["step_s"],
                   "compiled_over_jax": compiled["step_s"] / jitted["step_s"],
                   "eager_over_jax": eager["step_s"] / jitted["step_s"],
                   "jax_jit_gloo_processes_s": jitted_mp["step_s"],
                   "compiled_over_jax_gloo_processes": compiled["step_s"] / jitted_mp["step_s"],
                   "compile_first_call_s": compiled["first_call_s"],
                   "losses": {"eager": eager["loss"], "compiled": compiled["loss"],
                              "jax": jitted["loss"], "jax_gloo_processes": jitted_mp["loss"]},
                   "load_before": load_before, "load_after": load_after}
        if "profile" in torch_res[model]:
            summary["profile"] = torch_res[model]["profile"]
        rows.append(summary)
    return rows


# issue 24 item 2's goals on gloo ranks: eager <= 1.5x JAX jit on gloo
# processes, compiled <= 1.0x
EAGER_GOAL, COMPILED_GOAL = 1.5, 1.0


def rows(cfg: dict) -> list[Row]:
    """``gloo_step`` rows of ``python -m benchmarks``: the Keras MLP's and
    transformer block's eager and compiled (Keras's default ``inductor``)
    steps against JAX's jitted step on 2 gloo processes (the compiled rows'
    notes give the first compiled call: issue 24 asks at most 30 s for the
    MLP, 60 s for the transformer block); a failed side is an error row."""
    steps = cfg.get("step_steps", 20)
    names = {"mlp": "Keras MLP (mlp:mp)", "transformer": "Keras transformer block (transformer:mp)"}
    try:
        found = measure(list(names), steps, 3, "inductor")
    except KerasStepFailed as err:
        return [Row("gloo_step", f"Keras {', '.join(names)} train_on_batch, mesh (1, 2)",
                    status=f"error: {err}"[:300])]
    out = []
    for s in found:
        case = f"{names[s['model']]} train_on_batch, mesh (1, 2), global batch {GLOBAL_BATCH}"
        note = (f"JAX jit on {WORLD} processes over gloo; median of {steps} steps, rank 0; JAX in "
                f"one process {s['jax_jit_s'] * 1e3:.2f} ms; losses {s['losses']}; load "
                f"{s['load_before']} -> {s['load_after']}")
        out += [Row("gloo_step", f"{case}, eager, {WORLD} gloo ranks vs JAX jit on {WORLD} gloo "
                                 "processes", s["eager_s"], s["jax_jit_gloo_processes_s"],
                    goal=EAGER_GOAL, note=note),
                Row("gloo_step", f"{case}, compiled (inductor), {WORLD} gloo ranks vs JAX jit on "
                                 f"{WORLD} gloo processes", s["compiled_s"],
                    s["jax_jit_gloo_processes_s"], goal=COMPILED_GOAL,
                    note=note + f"; first compiled call {s['compile_first_call_s']:.1f} s")]
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="mlp,transformer")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--backend", default="inductor", help="torch.compile backend")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--no-output-layouts", action="store_true",
                   help="drop the driver's .*dense.*output layouts (both sides)")
    p.add_argument("--role", choices=["main", "torch", "jax", "jax-process"], default="main")
    p.add_argument("--process-id", type=int)
    p.add_argument("--port", type=int)
    p.add_argument("--out")
    a = p.parse_args()
    models = a.models.split(",")
    if a.role == "torch":
        return torch_rank(models, a.steps, a.warmup, a.backend, a.profile, a.out,
                          not a.no_output_layouts)
    if a.role == "jax":
        return print(json.dumps(jax_child(models, a.steps, a.warmup, not a.no_output_layouts)))
    if a.role == "jax-process":
        return jax_process(models, a.steps, a.warmup, not a.no_output_layouts, a.process_id,
                           a.port, a.out)
    load_before = load_average()
    rows = measure(models, a.steps, a.warmup, a.backend, a.profile, not a.no_output_layouts)
    load_after = load_average()
    for summary in rows:
        print(json.dumps(summary))
    print(f"Keras ModelParallel train_on_batch, {WORLD} gloo ranks vs {WORLD} CPU devices, "
          f"mesh (1, 2), global batch {GLOBAL_BATCH}, backend {a.backend}, "
          f"{'without' if a.no_output_layouts else 'with'} output layouts, "
          f"load {load_before} -> {load_after}")
    for s in rows:
        print(f"  {s['model']:12s} eager {s['eager_s'] * 1e3:8.2f} ms  compiled "
              f"{s['compiled_s'] * 1e3:8.2f} ms ({s['compiled_over_eager']:.2f}x eager, "
              f"{s['compiled_over_jax']:.2f}x JAX, "
              f"{s['compiled_over_jax_gloo_processes']:.2f}x JAX on gloo processes)  "
              f"JAX jit {s['jax_jit_s'] * 1e3:7.2f} ms (2 devices, 1 process), "
              f"{s['jax_jit_gloo_processes_s'] * 1e3:7.2f} ms (2 processes, gloo)  "
              f"first compiled call {s['compile_first_call_s']:.1f} s")


if __name__ == "__main__":
    main()
