"""Where the eager Keras ``ModelParallel`` step's time goes on 2 gloo ranks,
op by op and by layer of the stack (issue 24, item 2).

The model is ``benchmarks/keras_compiled_step.py``'s (the Keras parity
driver's ``mlp:mp``: mesh (1, 2) ``batch, model``, Megatron column/row
kernels, the ``.*dense.*output`` layouts, global batch 16, Adam), eager
``train_on_batch`` on 2 gloo ranks started by torchrun, one thread each.
Per rank, after 3 warm-up steps:

* ``wall_ms``: the median unprofiled step;
* ``profiler``: ``torch.profiler``'s self CPU time per step of the aten ops
  (the arithmetic JAX also does), of the process-group collectives and of
  everything else, the aten op count, the collectives by name;
* ``calls``: per step, how many times the DTensor and parity entry points
  that move or rewrap data ran (``DTensor.from_local`` / ``to_local`` /
  ``redistribute``, DTensor's ``redistribute_local_tensor``, parity's
  mode dispatch, parity's collectives), from cProfile;
* ``python_self_ms``: cProfile's self time per step grouped by where the
  Python lives (parity's Keras glue, parity's mode, parity's other layers,
  DTensor, the rest of torch, Keras, C calls) -- cProfile slows Python
  down, so these are shares, not times;
* ``top``: the functions with the most self time.

    python -m benchmarks.keras_eager_profile [--steps 10] [--dump DIR]   # JSON per rank, then a table
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

ROOT = Path(__file__).resolve().parents[1]
WORLD = 2

# cProfile's (file suffix, function) of the entry points counted per step
COUNTED = {
    "DTensor.from_local": ("torch/distributed/tensor/_api.py", "from_local"),
    "DTensor.to_local": ("torch/distributed/tensor/_api.py", "to_local"),
    "DTensor.redistribute": ("torch/distributed/tensor/_api.py", "redistribute"),
    "redistribute_local_tensor": ("torch/distributed/tensor/_redistribute.py",
                                  "redistribute_local_tensor"),
    "DTensor dispatch (OpDispatcher.dispatch)": ("torch/distributed/tensor/_dispatch.py", "dispatch"),
    "parity mode __torch_function__": ("parity/torch_impl/semantics/mode.py", "__torch_function__"),
    "parity mode _eager (rule applied)": ("parity/torch_impl/semantics/mode.py", "_eager"),
    "parity distribute_data_input": ("parity/torch_impl/arrays", "distribute_data_input"),
}

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


def _group(file: str) -> str:
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


def _cprofile_account(step, n: int, dump: str | None) -> dict:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(n):
        step()
    profiler.disable()
    if dump:
        profiler.dump_stats(dump)
    stats = pstats.Stats(profiler).stats
    calls = {name: 0.0 for name in COUNTED}
    groups: dict[str, float] = {}
    top = []
    for (file, _line, fn), (_cc, nc, tt, _ct, _callers) in stats.items():
        path = file.replace(os.sep, "/")
        for name, (suffix, func) in COUNTED.items():
            if fn == func and suffix in path:
                calls[name] += nc / n
        group = _group(path)
        groups[group] = groups.get(group, 0.0) + tt * 1e3 / n
        top.append((tt * 1e3 / n, nc / n, f"{'/'.join(path.split('/')[-3:])}:{fn}"))
    top.sort(reverse=True)
    return {"calls": {k: round(v, 1) for k, v in calls.items()},
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
        for _ in range(steps):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        result = {"rank": rank, "wall_ms": round(statistics.median(times) * 1e3, 3),
                  "profiler": _profiler_account(step, steps), **_cprofile_account(step, steps, dump and f"{dump}/rank{rank}.pstats")}
    Path(f"{out}.rank{rank}.json").write_text(json.dumps(result))


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--role", choices=["main", "torch"], default="main")
    p.add_argument("--out")
    p.add_argument("--dump", help="a folder: write each rank's cProfile stats there (rank<N>.pstats)")
    a = p.parse_args()
    if a.role == "torch":
        return torch_rank(a.steps, a.out, a.dump)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    load_before = _load()
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "profile")
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                               f"--nproc_per_node={WORLD}", "-m", "benchmarks.keras_eager_profile",
                               "--role", "torch", "--steps", str(a.steps), "--out", out,
                               *(["--dump", str(Path(a.dump).resolve())] if a.dump else [])],
                              env=env, cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"torch ranks failed:\n{(proc.stdout + proc.stderr)[-6000:]}")
        ranks = [json.loads(Path(f"{out}.rank{r}.json").read_text()) for r in range(WORLD)]
    summary = {"model": "keras mlp:mp, mesh (1, 2), global batch 16, Adam", "steps": a.steps,
               "load": f"{load_before} -> {_load()}", "ranks": ranks}
    print(json.dumps(summary))
    for r in ranks:
        prof = r["profiler"]
        print(f"rank {r['rank']}: step {r['wall_ms']:.2f} ms (unprofiled median); profiler self CPU "
              f"per step: aten {prof['aten_self_ms']:.2f} ms ({prof['aten_ops']:.0f} ops), "
              f"collectives {prof['collectives_self_ms']:.2f} ms {prof['collectives_per_step']}, "
              f"other {prof['other_self_ms']:.2f} ms")
        print("  calls per step: " + ", ".join(f"{k} {v:g}" for k, v in r["calls"].items()))
        print("  Python self ms per step (cProfile, inflated): "
              + ", ".join(f"{k} {v:.2f}" for k, v in r["python_self_ms"].items()))
        for ms, c, name in r["top"][:12]:
            print(f"    {ms:8.3f} ms {c:7.1f} calls  {name}")
    print(f"load {summary['load']}")


if __name__ == "__main__":
    main()
