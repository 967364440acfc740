"""A tensor-parallel (Megatron) MLP training step on gloo ranks: parity's
``jax_semantics()`` step eager, the same step under ``torch.compile``, and
``jax.jit`` of the same step on as many CPU devices (one process), and on
as many JAX processes with one CPU device each and gloo collectives (the
torch ranks' terms) -- ratios from one run (issue 15, item 5).

    python -m benchmarks.compiled_step [--world 2] [--steps 20] [--backend aot_eager]
    python -m benchmarks.compiled_step --first-compile   # first compile: parity vs plain DTensor

Model: x (batch 64, 256) replicated, w1 (256, 512) column-parallel, w2
(512, 16) row-parallel on mesh axis ``model``,
``mean((tanh(x @ w1) @ w2 - 1) ** 2)``, a hand-written SGD update with
``loss.backward()`` inside the compiled step. Each timing is the median
step after warm-up (the compile happens in warm-up), rank 0's; one thread
per process on both sides. Prints one JSON line, then a table.
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

from benchmarks.common import Row, load_average

ROOT = Path(__file__).resolve().parents[1]
BATCH, FEATURES, HIDDEN, OUT = 64, 256, 512, 16
LR = 0.1


def host(shape, seed):
    import numpy as np

    return (np.random.default_rng(seed).standard_normal(shape) * 0.05).astype(np.float32)


def _median_step(fn, steps: int, warmup: int, sync=None) -> dict:
    """``step_s``: the median step's wall time; ``cpu_s``: this process's
    CPU time (all its threads) per step over the same steps -- on a machine
    shared with other jobs the wall time holds the time others held the
    cores, the CPU time does not."""
    for _ in range(warmup):
        fn()
    times = []
    cpu_start = time.process_time()
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        times.append(time.perf_counter() - start)
    cpu = (time.process_time() - cpu_start) / steps
    times.sort()
    return {"step_s": times[len(times) // 2], "cpu_s": cpu}


def sgd_step(x, w1, w2):
    """One training step of the MLP: loss, backward, SGD update; the loss."""
    import torch

    loss = (torch.tanh(x @ w1) @ w2 - 1).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        for p in (w1, w2):
            p.sub_(LR * p.grad)
            p.grad = None
    return loss


def torch_rank(steps: int, warmup: int, backend: str, out: str) -> None:
    """One gloo rank: eager and compiled step times (rank 0 writes them)."""
    import torch

    import parity
    from parity import torch_impl as ti

    torch.set_num_threads(1)
    ti.initialize()
    mesh = parity.DeviceMesh((ti.num_processes(),), ("model",))
    L = parity.TensorLayout
    x = ti.distribute_tensor(host((BATCH, FEATURES), 0), L((None, None), mesh))
    result = {}
    for name in ("eager", "compiled"):
        torch._dynamo.reset()
        w1 = ti.distribute_variable(host((FEATURES, HIDDEN), 1), L((None, "model"), mesh))
        w2 = ti.distribute_variable(host((HIDDEN, OUT), 2), L(("model", None), mesh))

        def step():
            return sgd_step(x, w1, w2)

        fn = torch.compile(step, backend=backend) if name == "compiled" else step
        with ti.jax_semantics():
            start = time.perf_counter()
            fn()
            first = time.perf_counter() - start
            result[name] = {**_median_step(fn, steps, warmup), "first_call_s": first}
    if ti.process_id() == 0:
        Path(out).write_text(json.dumps(result))


def first_compile_rank(backend: str, out: str) -> None:
    """One gloo rank: the first compiled call of the same MLP, under
    ``jax_semantics()`` and on plain DTensor (rank 0 writes the seconds).

    Plain DTensor cannot compile ``loss.backward()`` inside the step
    (``tests/test_compiled_step.py``), so the compared unit is the compiled
    forward and loss plus the eager backward of its result (AOTAutograd
    compiles the backward graph at that first backward), on both sides, each
    after ``torch._dynamo.reset()``, after one unrelated compile that pays
    torch's one-time costs; two rounds in opposite orders, the lower of each
    side kept (by CPU time: ``cpu_s``, the process's, less moved by other
    jobs on the machine than ``s``, wall time). parity's
    whole step (backward and update inside the compiled function) is
    ``whole_step_s``. ``dynamo_s``: dynamo's own tracing time in that call
    (dynamo's ``bytecode_tracing`` phase); ``phases``: every phase dynamo
    timed, in seconds."""
    import torch
    import parity
    from parity import torch_impl as ti

    torch.set_num_threads(1)
    ti.initialize()
    mesh = parity.DeviceMesh((ti.num_processes(),), ("model",))
    L = parity.TensorLayout
    x = ti.distribute_tensor(host((BATCH, FEATURES), 0), L((None, None), mesh))

    def weights():
        return (ti.distribute_variable(host((FEATURES, HIDDEN), 1), L((None, "model"), mesh)),
                ti.distribute_variable(host((HIDDEN, OUT), 2), L(("model", None), mesh)))

    def phases() -> dict:
        from torch._dynamo.utils import compilation_time_metrics

        return {k: round(sum(v), 3) for k, v in compilation_time_metrics.items()}

    def timed(fn, scope) -> dict:
        torch._dynamo.reset()
        torch._dynamo.utils.compilation_time_metrics.clear()
        with scope():
            start, cpu = time.perf_counter(), time.process_time()
            fn()
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        found = phases()
        return {"s": seconds, "cpu_s": cpu, "dynamo_s": found.get("bytecode_tracing", 0.0),
                "phases": found}

    # torch's one-time costs of a first compile in a process (imports,
    # AOTAutograd's set-up): paid here, by neither side
    t = torch.ones(4, requires_grad=True)
    timed(lambda: torch.compile(lambda: (t * 2).sum(), backend=backend)().backward(), _no_scope)
    result = {}
    # two rounds, the order reversed in the second: the lower of each side counts
    for order in ((("plain", _no_scope), ("parity", ti.jax_semantics)),
                  (("parity", ti.jax_semantics), ("plain", _no_scope))):
        for name, scope in order:
            w1, w2 = weights()
            fwd = torch.compile(lambda: (torch.tanh(x @ w1) @ w2 - 1).pow(2).mean(),
                                backend=backend)
            found = timed(lambda: fwd().backward(), scope)
            best = result.get(f"{name}_fwd_loss")
            if best is None or found["cpu_s"] < best["cpu_s"]:
                result[f"{name}_fwd_loss"] = found
    w1, w2 = weights()

    def step():
        return sgd_step(x, w1, w2)

    result["parity_whole_step"] = timed(torch.compile(step, backend=backend), ti.jax_semantics)
    if ti.process_id() == 0:
        Path(out).write_text(json.dumps(result))


class _no_scope:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def measure_first_compile(world: int, backend: str, env: dict) -> dict:
    """The first compiled call's seconds on ``world`` gloo ranks, parity
    against plain DTensor (``first_compile_rank``'s record, with the ratios
    and the load). Raises ``StepRunFailed`` when the ranks fail."""
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "first.json")
        _run_ranks(world, ["--role", "first-compile", "--backend", backend, "--out", out], env)
        res = json.loads(Path(out).read_text())
    plain, ours = res["plain_fwd_loss"], res["parity_fwd_loss"]
    return {"world": world, "backend": backend, **res,
            "parity_over_plain": ours["s"] / plain["s"],
            "parity_over_plain_cpu": ours["cpu_s"] / plain["cpu_s"], "load": load_average()}


def first_compile(a, env: dict) -> None:
    """``--first-compile``: print the first compiled call's seconds, parity
    against plain DTensor (issue 24 item 1: goal <= 1.3x)."""
    summary = measure_first_compile(a.world, a.backend, env)
    plain, ours = summary["plain_fwd_loss"], summary["parity_fwd_loss"]
    print(json.dumps(summary))
    print(f"first compiled call, MLP {FEATURES}-{HIDDEN}-{OUT}, {a.world} gloo ranks, {a.backend}")
    print(f"  plain DTensor, forward+loss (+ eager backward)  {plain['s']:7.2f} s "
          f"(CPU {plain['cpu_s']:.2f} s, dynamo {plain['dynamo_s']:.2f} s)")
    print(f"  jax_semantics, forward+loss (+ eager backward)  {ours['s']:7.2f} s "
          f"(CPU {ours['cpu_s']:.2f} s, dynamo {ours['dynamo_s']:.2f} s)  "
          f"{summary['parity_over_plain_cpu']:.2f}x plain (CPU)")
    whole = summary["parity_whole_step"]
    print(f"  jax_semantics, whole step                       {whole['s']:7.2f} s "
          f"(CPU {whole['cpu_s']:.2f} s, dynamo {whole['dynamo_s']:.2f} s)")
    print(f"  load average {summary['load']}")


class StepRunFailed(RuntimeError):
    """The torch ranks or the JAX processes failed; ``output`` is their log tail."""

    def __init__(self, who: str, output: str) -> None:
        self.who = who
        self.output = output
        super().__init__(f"{who} failed:\n{output}")


def _run_ranks(world: int, args: list[str], env: dict) -> None:
    """This module on ``world`` gloo ranks (torchrun) with ``args``."""
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc_per_node={world}", "-m", "benchmarks.compiled_step", *args],
                          env=env, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise StepRunFailed("torch ranks", (proc.stdout + proc.stderr)[-6000:])


def jax_child(world: int, steps: int, warmup: int) -> dict:
    """``jax.jit`` of the same step on ``world`` CPU devices."""
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={world}"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import numpy as np
    from jax.sharding import Mesh

    mesh = Mesh(np.array(jax.devices()[:world]), ("model",))
    return _median_step(_jax_step(mesh, jax.device_put), steps, warmup)


def _jax_step(mesh, put):
    """One jitted training step of the tensor-parallel MLP on ``mesh``
    (``model`` axis), its arrays placed by ``put(value, sharding)``: a
    function that runs it and waits."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    weights = (NamedSharding(mesh, P(None, "model")), NamedSharding(mesh, P("model", None)))

    def loss_fn(p, x):
        return jnp.mean((jnp.tanh(x @ p[0]) @ p[1] - 1) ** 2)

    @jax.jit
    def step(p, x):
        loss, g = jax.value_and_grad(loss_fn)(p, x)
        return loss, tuple(w - LR * gw for w, gw in zip(p, g))

    x = put(host((BATCH, FEATURES), 0), NamedSharding(mesh, P()))
    state = {"p": (put(host((FEATURES, HIDDEN), 1), weights[0]),
                   put(host((HIDDEN, OUT), 2), weights[1]))}

    def run():
        loss, state["p"] = step(state["p"], x)
        loss.block_until_ready()

    return run


def jax_process(steps: int, warmup: int, world: int, process_id: int, port: int,
                out: str) -> None:
    """One of ``world`` JAX processes, one CPU device each, collectives over
    gloo: ``jax.jit`` of the same step on the torch ranks' terms (process 0
    writes its time)."""
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=world, process_id=process_id)
    import numpy as np
    from jax.sharding import Mesh

    mesh = Mesh(np.array(jax.devices()), ("model",))

    def put(value, sharding):  # each process holds only its own shards
        return jax.make_array_from_callback(value.shape, sharding, lambda idx: value[idx])

    result = _median_step(_jax_step(mesh, put), steps, warmup)
    if process_id == 0:
        Path(out).write_text(json.dumps(result))


def _jax_processes(world: int, steps: int, warmup: int, env: dict, tmp: str) -> dict:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = str(Path(tmp) / "jax.json")
    procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.compiled_step", "--role",
                               "jax-process", "--world", str(world), "--process-id", str(i),
                               "--port", str(port), "--steps", str(steps), "--warmup",
                               str(warmup), "--out", out],
                              env=env, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for i in range(world)]
    logs = [proc.communicate()[0] for proc in procs]
    if any(proc.returncode for proc in procs):
        raise StepRunFailed("JAX processes", "\n".join(log[-3000:] for log in logs))
    return json.loads(Path(out).read_text())


def measure_steps(world: int, steps: int, warmup: int, backend: str, env: dict) -> dict:
    """Median eager and compiled step on ``world`` gloo ranks, ``jax.jit`` on
    ``world`` JAX processes over gloo and on ``world`` devices of one
    process, one after the other (never side by side), with the ratios and
    the load. Raises ``StepRunFailed`` when a side fails."""
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "torch.json")
        _run_ranks(world, ["--role", "torch", "--steps", str(steps), "--warmup", str(warmup),
                           "--backend", backend, "--out", out], env)
        torch_res = json.loads(Path(out).read_text())
        jax_mp = _jax_processes(world, steps, warmup, env, tmp)
    jax_proc = subprocess.run([sys.executable, "-m", "benchmarks.compiled_step", "--role", "jax",
                               "--world", str(world), "--steps", str(steps),
                               "--warmup", str(warmup)],
                              env=env, cwd=ROOT, capture_output=True, text=True)
    if jax_proc.returncode != 0:
        raise StepRunFailed("JAX process", jax_proc.stderr[-3000:])
    jax_res = json.loads(jax_proc.stdout.strip().splitlines()[-1])
    eager, compiled, jitted = (torch_res["eager"]["step_s"], torch_res["compiled"]["step_s"],
                               jax_res["step_s"])
    return {"world": world, "backend": backend, "eager_s": eager, "compiled_s": compiled,
            "jax_jit_s": jitted, "compiled_over_eager": compiled / eager,
            "compiled_over_jax": compiled / jitted, "eager_over_jax": eager / jitted,
            "compile_first_call_s": torch_res["compiled"]["first_call_s"],
            "jax_jit_gloo_processes_s": jax_mp["step_s"],
            "cpu_s": {"eager": torch_res["eager"]["cpu_s"], "compiled": torch_res["compiled"]["cpu_s"],
                      "jax_gloo_processes": jax_mp["cpu_s"]},
            "compiled_over_jax_gloo_processes": compiled / jax_mp["step_s"],
            "load": load_average()}


# issue 24's goals: first compile <= 1.3x plain DTensor's; on gloo ranks the
# eager step <= 1.5x JAX jit on gloo processes, the compiled step <= 1.0x
FIRST_COMPILE_GOAL, EAGER_GOAL, COMPILED_GOAL = 1.3, 1.5, 1.0


def rows(cfg: dict, families: set[str]) -> list[Row]:
    """``first_compile`` and ``gloo_step`` rows of ``python -m benchmarks``
    (2 gloo ranks, ``aot_eager``); a side that fails is an error row."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    world, backend, model = 2, "aot_eager", f"TP MLP {FEATURES}-{HIDDEN}-{OUT}, batch {BATCH}"
    out = []
    if "first_compile" in families:
        case = (f"first compiled call, {model} forward+loss (+ eager backward), {world} gloo "
                f"ranks, {backend}: jax_semantics vs plain DTensor (CPU s)")
        try:
            s = measure_first_compile(world, backend, env)
            ours, plain, whole = s["parity_fwd_loss"], s["plain_fwd_loss"], s["parity_whole_step"]
            out.append(Row("first_compile", case, ours["cpu_s"], plain["cpu_s"], goal=FIRST_COMPILE_GOAL,
                           note=f"wall {ours['s']:.2f} s vs {plain['s']:.2f} s; dynamo tracing "
                                f"{ours['dynamo_s']:.2f} s vs {plain['dynamo_s']:.2f} s; parity's "
                                f"whole step (backward inside) {whole['s']:.2f} s; load {s['load']}"))
        except StepRunFailed as err:
            out.append(Row("first_compile", case, status=f"error: {err}"[:300]))
    if "gloo_step" in families:
        steps = cfg.get("step_steps", 20)
        try:
            s = measure_steps(world, steps, 3, backend, env)
            note = (f"JAX jit on {world} processes over gloo; median of {steps} steps, rank 0; "
                    f"JAX in one process {s['jax_jit_s'] * 1e3:.2f} ms; load {s['load']}")
            cpu = s["cpu_s"]

            def cpu_note(run: str) -> str:
                return (f"; CPU per step (rank 0, all threads) {cpu[run] * 1e3:.2f} ms vs JAX's "
                        f"{cpu['jax_gloo_processes'] * 1e3:.2f} ms "
                        f"({cpu[run] / cpu['jax_gloo_processes']:.2f}x)")

            out.append(Row("gloo_step", f"{model} eager step, {world} gloo ranks vs JAX jit on "
                           f"{world} gloo processes", s["eager_s"], s["jax_jit_gloo_processes_s"],
                           goal=EAGER_GOAL, note=note + cpu_note("eager")))
            out.append(Row("gloo_step", f"{model} compiled step ({backend}), {world} gloo ranks vs "
                           f"JAX jit on {world} gloo processes", s["compiled_s"],
                           s["jax_jit_gloo_processes_s"], goal=COMPILED_GOAL,
                           note=note + cpu_note("compiled")
                           + f"; first compiled call {s['compile_first_call_s']:.1f} s"))
        except StepRunFailed as err:
            out.append(Row("gloo_step", f"{model} step, {world} gloo ranks", status=f"error: {err}"[:300]))
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--backend", default="aot_eager", help="torch.compile backend")
    p.add_argument("--first-compile", action="store_true",
                   help="only the first compiled call: jax_semantics() vs plain DTensor")
    p.add_argument("--role", choices=["main", "torch", "jax", "jax-process", "first-compile"],
                   default="main")
    p.add_argument("--process-id", type=int)
    p.add_argument("--port", type=int)
    p.add_argument("--out")
    a = p.parse_args()
    if a.role == "torch":
        return torch_rank(a.steps, a.warmup, a.backend, a.out)
    if a.role == "first-compile":
        return first_compile_rank(a.backend, a.out)
    if a.role == "jax":
        return print(json.dumps(jax_child(a.world, a.steps, a.warmup)))
    if a.role == "jax-process":
        return jax_process(a.steps, a.warmup, a.world, a.process_id, a.port, a.out)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    if a.first_compile:
        return first_compile(a, env)
    summary = measure_steps(a.world, a.steps, a.warmup, a.backend, env)
    eager, compiled, jitted = summary["eager_s"], summary["compiled_s"], summary["jax_jit_s"]
    print(json.dumps(summary))
    print(f"MLP {FEATURES}-{HIDDEN}-{OUT}, batch {BATCH}, {a.world} gloo ranks / CPU devices")
    print(f"  parity eager     {eager * 1e3:8.2f} ms")
    print(f"  parity compiled  {compiled * 1e3:8.2f} ms  ({compiled / eager:.2f}x eager, "
          f"{compiled / jitted:.2f}x JAX)   first call {summary['compile_first_call_s']:.1f} s")
    print(f"  JAX jit          {jitted * 1e3:8.2f} ms  ({a.world} devices in one process)")
    print(f"  JAX jit          {summary['jax_jit_gloo_processes_s'] * 1e3:8.2f} ms  ({a.world} processes, gloo; "
          f"compiled is {summary['compiled_over_jax_gloo_processes']:.2f}x this)")
    cpu = summary["cpu_s"]
    print("  CPU per step (all threads, rank 0): " + ", ".join(
        f"{k} {v * 1e3:.2f} ms" for k, v in cpu.items()))
    print(f"  load average {summary['load']}")


if __name__ == "__main__":
    main()
