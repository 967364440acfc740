"""Where the eager Keras ``ModelParallel`` step's time goes on 2 gloo ranks,
op by op and by layer of the stack.

The model is ``benchmarks/keras_compiled_step.py``'s (the Keras parity
driver's ``mlp:mp``: mesh (1, 2) ``batch, model``, Megatron column/row
kernels, the ``.*dense.*output`` layouts, global batch 16, Adam), eager
``train_on_batch`` on 2 gloo ranks started by torchrun, one thread each.
Per rank, after 3 warm-up steps:

* ``wall_ms``: the median unprofiled step; ``cpu_ms``: the process's CPU
  time per step (all its threads) over the same steps -- on a machine
  shared with other jobs the wall time holds the time others held the
  cores and the waits for the other rank, the CPU time does not;
* ``profiler``: ``torch.profiler``'s self CPU time per step of the aten ops
  (the arithmetic JAX also does), of the process-group collectives and of
  everything else, the aten op count, the collectives by name;
* ``calls``: per step, how many times the DTensor and parity entry points
  that move or rewrap data ran (``DTensor.from_local`` / ``to_local`` /
  ``redistribute``, DTensor's ``redistribute_local_tensor``, parity's
  mode dispatch, parity's collectives), from cProfile;
* ``python_self_ms``: cProfile's self time per step grouped by where the
  Python lives (parity's Keras glue, parity's mode, parity's other layers,
  DTensor, the rest of torch, Keras, C calls, the collectives) -- cProfile
  times the main thread's CPU (``time.thread_time``: no waits, no time other
  jobs held the core, not gloo's own threads) and slows Python down, so
  these are shares, not times;
* ``top``: the functions with the most self time.

    python -m benchmarks.keras_eager_profile [--steps 10] [--dump DIR] [--results FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import load_average

ROOT = Path(__file__).resolve().parents[1]
WORLD = 2

# cProfile's (file suffix, function) of the entry points counted per step
COUNTED = {
    "DTensor.from_local": ("torch/distributed/tensor/_api.py", "from_local"),
    "DTensor.to_local": ("torch/distributed/tensor/_api.py", "to_local"),
    "DTensor.redistribute": ("torch/distributed/tensor/_api.py", "redistribute"),
    "redistribute_local_tensor": ("torch/distributed/tensor/_redistribute.py",
                                  "redistribute_local_tensor"),
    "parity mode: calls intercepted": ("parity/torch_impl/semantics/mode.py", "__torch_function__"),
    "parity mode: past the fast path (_eager)": ("parity/torch_impl/semantics/mode.py", "_eager"),
    "parity mode: no DTensor operand (_plain)": ("parity/torch_impl/semantics/mode.py", "_plain"),
    "parity mode: a sharding rule applied (_run)": ("parity/torch_impl/semantics/mode.py", "_run"),
    "collective waits (wait_tensor)": ("torch/distributed/_functional_collectives.py", "wait_tensor"),
}
# for these, which callers the calls come from
BY_CALLER = ("DTensor.from_local", "DTensor.redistribute")

# where Python self time is grouped, first match wins (path fragments)
GROUPS = (
    ("parity keras glue (torch_impl/keras)", "parity/torch_impl/keras/"),
    ("parity mode (torch_impl/semantics)", "parity/torch_impl/semantics/"),
    ("parity other (collectives, layouts, arrays, runtime)", "parity/"),
    ("DTensor (torch/distributed/tensor)", "torch/distributed/tensor/"),
    ("torch.distributed other", "torch/distributed/"),
    ("torch autograd/optim/other Python", "torch/"),
    ("keras", "keras/"),
)


# torch.library's redispatch of the process-group ops (``_c10d_functional``'s
# all_reduce, all_gather_into_tensor, wait_tensor): their gloo work and the
# wait for the other rank run inside it, not in a C call cProfile sees
COLLECTIVE_CALLS = ("torch/_ops.py", "redispatch")


def _group(file: str, fn: str) -> str:
    if file.endswith(COLLECTIVE_CALLS[0]) and fn == COLLECTIVE_CALLS[1]:
        return "collectives (c10d functional ops, waits included)"
    if file == "~":
        return "C calls (aten kernels, C++ dispatch, gloo)"
    for name, fragment in GROUPS:
        if fragment in file:
            return name
    return "other Python"


def _profiler_account(step, n: int) -> dict:
    import torch.profiler as tp

    with tp.profile(activities=[tp.ProfilerActivity.CPU]) as prof:
        for _ in range(n):
            step()
    aten = c10d = total = 0.0
    aten_calls = 0
    collectives: dict[str, float] = {}
    for e in prof.key_averages():
        ms = e.self_cpu_time_total / 1e3 / n
        total += ms
        if e.key.startswith("aten::"):
            aten += ms
            aten_calls += e.count
        elif e.key.startswith(("c10d::", "gloo:", "record_param_comms")):
            c10d += ms
            if e.key.startswith("c10d::"):
                collectives[e.key] = collectives.get(e.key, 0) + e.count / n
    return {"aten_self_ms": round(aten, 3), "collectives_self_ms": round(c10d, 3),
            "other_self_ms": round(total - aten - c10d, 3), "aten_ops": aten_calls / n,
            "collectives_per_step": collectives}


def _short(path: str, fn: str) -> str:
    return f"{'/'.join(path.split('/')[-2:])}:{fn}"


def _cprofile_account(step, n: int, dump: str | None) -> dict:
    profiler = cProfile.Profile(time.thread_time)  # this thread's CPU: waits and load left out
    profiler.enable()
    for _ in range(n):
        step()
    profiler.disable()
    if dump:
        profiler.dump_stats(dump)
    stats = pstats.Stats(profiler).stats
    calls = {name: 0.0 for name in COUNTED}
    cumulative_ms = {name: 0.0 for name in COUNTED}
    callers: dict[str, dict[str, float]] = {name: {} for name in BY_CALLER}
    groups: dict[str, float] = {}
    top = []
    for (file, _line, fn), (_cc, nc, tt, ct, by) in stats.items():
        path = file.replace(os.sep, "/")
        for name, (suffix, func) in COUNTED.items():
            if fn == func and suffix in path:
                calls[name] += nc / n
                cumulative_ms[name] += ct * 1e3 / n
                if name in callers:
                    for (cfile, _cline, cfn), caller in by.items():
                        key = _short(cfile.replace(os.sep, "/"), cfn)
                        callers[name][key] = callers[name].get(key, 0.0) + caller[1] / n
        group = _group(path, fn)
        groups[group] = groups.get(group, 0.0) + tt * 1e3 / n
        top.append((tt * 1e3 / n, nc / n, _short(path, fn)))
    top.sort(reverse=True)
    return {"calls": {k: round(v, 1) for k, v in calls.items()},
            "cumulative_ms": {k: round(v, 2) for k, v in cumulative_ms.items()},
            "callers": {k: {c: round(v, 1) for c, v in sorted(d.items(), key=lambda kv: -kv[1])}
                        for k, d in callers.items()},
            "python_self_ms": {k: round(v, 2) for k, v in sorted(groups.items(), key=lambda kv: -kv[1])},
            "top": [(round(ms, 3), round(c, 1), name) for ms, c, name in top[:25]]}


def torch_rank(steps: int, out: str, dump: str | None) -> None:
    os.environ["KERAS_BACKEND"] = "torch"
    import torch

    torch.set_num_threads(1)
    from parity import torch_impl

    torch_impl.install_keras()
    import keras
    from keras.src.distribution import distribution_lib as kdl

    from benchmarks import keras_compiled_step as kcs

    keras.distribution.initialize()
    rank, n = kdl.distribution_lib.process_id(), kdl.distribution_lib.num_processes()
    distribution, m, x, y = kcs._model_and_batch(kcs._driver(), keras, "mlp", False, rank, n, True)
    with distribution.scope():
        def step():
            return m.train_on_batch(x, y)

        for _ in range(3):
            step()
        times = []
        cpu_start = time.process_time()
        for _ in range(steps):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        cpu_ms = (time.process_time() - cpu_start) * 1e3 / steps
        result = {"rank": rank, "wall_ms": round(statistics.median(times) * 1e3, 3),
                  "cpu_ms": round(cpu_ms, 3),
                  "profiler": _profiler_account(step, steps), **_cprofile_account(step, steps, dump and f"{dump}/rank{rank}.pstats")}
    Path(f"{out}.rank{rank}.json").write_text(json.dumps(result))


def measurement(summary: dict, jax_ms: float, jax_cpu_ms: float) -> dict:
    """The run as a ``parity.measurement/1`` results file (``scripts/measurements.py``
    renders it into benchmarks/README.md): per step, rank 0 and rank 1."""
    import datetime

    from benchmarks.common import machine, provenance

    ranks = summary["ranks"]
    info = machine()

    def each(fn):
        return [fn(r) for r in ranks]

    def callers(r, name):
        return "; ".join(f"{c:g} from {k}" for k, c in r["callers"][name].items()) or "none"

    rows = [
        ["step wall time, unprofiled median", *each(lambda r: f"{r['wall_ms']:.1f} ms")],
        ["step CPU time (the process, all threads), unprofiled",
         *each(lambda r: f"{r['cpu_ms']:.1f} ms")],
        ["JAX jit of the same step on 2 gloo processes (rank 0): wall, CPU",
         f"{jax_ms:.1f} ms, {jax_cpu_ms:.1f} ms", "-"],
        ["aten ops: count, self CPU (torch.profiler)",
         *each(lambda r: f"{r['profiler']['aten_ops']:.0f}, {r['profiler']['aten_self_ms']:.1f} ms")],
        ["process-group collectives: launches, self CPU incl. waiting (torch.profiler)",
         *each(lambda r: f"{sum(r['profiler']['collectives_per_step'].values()):g}, "
                         f"{r['profiler']['collectives_self_ms']:.1f} ms")],
        ["everything else, self CPU (torch.profiler: Python, dispatch)",
         *each(lambda r: f"{r['profiler']['other_self_ms']:.1f} ms")],
    ]
    for name in COUNTED:
        rows.append([f"{name}: calls, cumulative (cProfile)",
                     *each(lambda r, name=name: f"{r['calls'][name]:g}, {r['cumulative_ms'][name]:.1f} ms")])
    for name in BY_CALLER:
        rows.append([f"{name}: by caller", *each(lambda r, name=name: callers(r, name))])
    for group in ranks[0]["python_self_ms"]:
        rows.append([f"self time in {group} (cProfile)",
                     *each(lambda r, group=group: f"{r['python_self_ms'].get(group, 0.0):.1f} ms")])
    prov = provenance(summary["command"])
    return {
        "schema": "parity.measurement/1", "page": "benchmarks/README.md", "order": 45,
        "title": "Where the eager Keras step's time goes on 2 gloo ranks",
        "date": prov["date"] or datetime.date.today().isoformat(), "commit": prov["commit"],
        "commit_note": "the commit the profile ran on",
        "machine": (f"{info['cpu']}, {info['affinity_cpus']} CPUs, Python {info['python']}, torch "
                    f"{info['torch']}, jax {info['jax']}, keras {info['keras']}; a machine shared with "
                    f"other jobs: load {summary['load']} (1, 5, 15 min averages, before -> after)"),
        "command": summary["command"], "source": "this run (benchmarks/keras_eager_profile.py)",
        "text": (f"Keras MLP `mlp:mp` (the parity driver's), mesh (1, 2), global batch 16, Adam, "
                 f"eager `train_on_batch`, per step over {summary['steps']} steps after 3 warm-up "
                 "steps. cProfile times the main thread's CPU and slows Python down: its times "
                 "are shares; the wall and CPU times and torch.profiler's are the step's."),
        "columns": ["per step", "rank 0", "rank 1"], "rows": rows,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--role", choices=["main", "torch"], default="main")
    p.add_argument("--out")
    p.add_argument("--dump", help="a folder: write each rank's cProfile stats there (rank<N>.pstats)")
    p.add_argument("--results", help="also write the account as a results file (docs/results/*.json)")
    a = p.parse_args()
    if a.role == "torch":
        return torch_rank(a.steps, a.out, a.dump)
    from types import SimpleNamespace

    from benchmarks import keras_compiled_step as kcs

    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    load_before = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "profile")
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                               f"--nproc_per_node={WORLD}", "-m", "benchmarks.keras_eager_profile",
                               "--role", "torch", "--steps", str(a.steps), "--out", out,
                               *(["--dump", str(Path(a.dump).resolve())] if a.dump else [])],
                              env=env, cwd=ROOT, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"torch ranks failed:\n{(proc.stdout + proc.stderr)[-6000:]}")
        ranks = [json.loads(Path(f"{out}.rank{r}.json").read_text()) for r in range(WORLD)]
    # JAX's jitted step on the torch ranks' terms, after the ranks (never beside them)
    jax = kcs._run_jax_processes(SimpleNamespace(models="mlp", steps=a.steps, warmup=3), [], env)
    jax_ms, jax_cpu_ms = jax["mlp"]["step_s"] * 1e3, jax["mlp"]["cpu_s"] * 1e3
    command = "python -m benchmarks.keras_eager_profile" + (f" --steps {a.steps}" if a.steps != 10 else "")
    summary = {"model": "keras mlp:mp, mesh (1, 2), global batch 16, Adam", "steps": a.steps,
               "load": f"{load_before} -> {load_average()}", "command": command,
               "jax_gloo_processes_ms": round(jax_ms, 3),
               "jax_gloo_processes_cpu_ms": round(jax_cpu_ms, 3), "ranks": ranks}
    print(json.dumps(summary))
    for r in ranks:
        prof = r["profiler"]
        print(f"rank {r['rank']}: step {r['wall_ms']:.2f} ms, CPU {r['cpu_ms']:.2f} ms "
              f"(unprofiled; JAX on gloo processes {jax_ms:.2f} ms, CPU {jax_cpu_ms:.2f} ms); "
              "profiler self CPU per step: aten "
              f"{prof['aten_self_ms']:.2f} ms ({prof['aten_ops']:.0f} ops), collectives "
              f"{prof['collectives_self_ms']:.2f} ms {prof['collectives_per_step']}, other "
              f"{prof['other_self_ms']:.2f} ms")
        print("  calls per step (cumulative ms): " + ", ".join(
            f"{k} {v:g} ({r['cumulative_ms'][k]:.1f})" for k, v in r["calls"].items()))
        print(f"  callers: {r['callers']}")
        print("  Python self CPU ms per step (cProfile, inflated): "
              + ", ".join(f"{k} {v:.2f}" for k, v in r["python_self_ms"].items()))
        for ms, c, name in r["top"][:12]:
            print(f"    {ms:8.3f} ms {c:7.1f} calls  {name}")
    print(f"load {summary['load']}")
    if a.results:
        Path(a.results).write_text(json.dumps(measurement(summary, jax_ms, jax_cpu_ms), indent=1) + "\n")
        print(f"wrote {a.results}")


if __name__ == "__main__":
    main()
