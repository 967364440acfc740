"""``python -m benchmarks [--quick] [--out benchmarks/results.json] [--only FAMILY ...]``

Runs every benchmark family, prints one table and writes the figures as
JSON. Each figure is parity's time (or bytes) against the raw library's,
measured in the same run: median of repeated samples, warm-up excluded.
``--quick`` is the smoke test's size: only what runs in this process
(memory on simulated ranks, the CUDA check) unless ``--only`` names more
families, which then run on 2 ranks with one small buffer: seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from benchmarks.common import Row, human_value, machine, provenance, usable_cpus

FAMILIES = ("collectives", "ops", "memory", "per_call", "training_ops", "random", "first_compile", "gloo_step",
            "keras_job", "collective_counts", "keras", "keras_hub", "conformance", "cuda")

FULL = {
    "world": 4, "sizes": [4 << 10, 256 << 10, 4 << 20, 64 << 20], "repeats": 5,
    "op_iters": 20, "op_sample_s": 0.02, "op_repeats": 41, "keras_steps": 10, "keras_timeout_s": 240, "conformance_cases": 40,
    "step_steps": 20, "counts_timeout_s": 600, "hub_steps": 4, "hub_timeout_s": 900,
}
QUICK = {
    "world": 2, "sizes": [4 << 10], "repeats": 2, "op_iters": 2, "keras_steps": 2,
    "keras_timeout_s": 120, "conformance_cases": 4, "step_steps": 3, "counts_timeout_s": 600,
    "hub_steps": 2, "hub_timeout_s": 900,
}
# families whose rows' notes (baseline, load, the JAX side's set-up) go into
# the results file's provenance notes, which scripts/measurements.py renders
NOTED = ("random", "first_compile", "gloo_step", "keras_job", "collective_counts", "keras",
         "keras_hub")
QUICK_SKIPS = ("collectives", "ops", "per_call", "training_ops", "random", "first_compile", "gloo_step",
               "keras_job", "collective_counts", "keras", "keras_hub", "conformance")


def _gloo_rows(cfg: dict, families: set[str]) -> list[Row]:
    from benchmarks import gloo_job

    wanted = [f for f in ("collectives", "ops", "memory") if f in families]
    if not wanted:
        return []
    jobs = [(cfg["world"], wanted)]
    cores = usable_cpus()
    if "ops" in wanted and 2 <= cores < cfg["world"]:
        # Per-op cost is per-process Python: also measure it with one rank per
        # core, as a training job runs, besides the oversubscribed world.
        jobs.append((cores - cores % 2, ["ops"]))
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the CPU job is gloo even on a GPU machine
    rows: list[Row] = []
    try:
        for world, families in jobs:
            print(f"gloo job ({world} ranks): {families}", flush=True)
            try:
                rows += gloo_job.run(dict(cfg, world=world, families=families))
            except Exception as err:  # noqa: BLE001 - a failed job is a row, not a crash
                rows += [Row(f, f"(gloo job, {world} ranks)",
                             status=f"error: {type(err).__name__}: {err}"[:300]) for f in families]
        return rows
    finally:
        if hidden is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = hidden


def collect(cfg: dict, families: set[str], quick: bool, explicit: set[str] = frozenset()) -> list[Row]:
    rows: list[Row] = []
    started = time.perf_counter()
    if quick:
        for name in QUICK_SKIPS:
            if name in families and name not in explicit:
                rows.append(Row(name, "(all)", status="skipped: --quick"))
                families = families - {name}
    if families & {"collectives", "ops", "memory"}:
        rows += _gloo_rows(cfg, families - ({"memory"} if quick else set()))
    if "memory" in families:
        from benchmarks import memory

        rows += memory.simulated(cfg)
    if "per_call" in families:
        from benchmarks import per_call

        rows += per_call.rows(200 if quick else per_call.CALLS)
    if "training_ops" in families:
        from benchmarks import training_ops

        rows += training_ops.rows(50 if quick else training_ops.CALLS)
    if "random" in families:
        from benchmarks import random_ops

        rows += random_ops.rows(quick)
    if families & {"first_compile", "gloo_step"}:
        from benchmarks import compiled_step

        print(f"first_compile / gloo_step ... ({time.perf_counter() - started:.0f} s so far)", flush=True)
        rows += compiled_step.rows(cfg, families)
    if "gloo_step" in families:
        from benchmarks import keras_compiled_step

        rows += keras_compiled_step.rows(cfg)
    if "keras_job" in families:
        from benchmarks import keras_job

        print(f"keras_job ... ({time.perf_counter() - started:.0f} s so far)", flush=True)
        rows += keras_job.rows(cfg)
    if "collective_counts" in families:
        from benchmarks import collective_counts

        print(f"collective_counts ... ({time.perf_counter() - started:.0f} s so far)", flush=True)
        rows += collective_counts.run(cfg)
    for name in ("keras", "keras_hub", "conformance"):
        if name not in families:
            continue
        print(f"{name} ... ({time.perf_counter() - started:.0f} s so far)", flush=True)
        if name == "keras":
            from benchmarks import keras_step

            rows += keras_step.run(cfg)
        elif name == "keras_hub":
            from benchmarks import keras_hub_step

            rows += keras_hub_step.run(cfg)
        else:
            from benchmarks import conformance_rate

            rows += conformance_rate.run(cfg)
    if "cuda" in families:
        from benchmarks import cuda

        rows += cuda.run(cfg, quick)
    return rows


def print_table(rows: list[Row], info: dict, seconds: float) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"parity benchmarks ({info['cpu']}, {info.get('affinity_cpus', info['cpu_count'])} "
                        f"CPUs, torch {info['torch']}; {seconds:.0f} s)")
    for col in ("family", "case", "parity", "raw", "ratio", "goal", "verdict / status", "note"):
        table.add_column(col, overflow="fold")
    for r in rows:
        ratio = f"{r.ratio:.3f}x" if r.ratio is not None else ""
        goal = f"<= {r.goal:.2f}x" if r.goal else ""
        verdict = r.verdict if r.status == "ok" else r.status
        style = "red" if verdict.startswith(("missed", "error")) else None
        table.add_row(r.family, r.case, human_value(r.parity, r.unit), human_value(r.raw, r.unit), ratio, goal,
                      verdict, r.note, style=style)
    Console(width=max(160, Console().width)).print(table)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke-test size: seconds")
    p.add_argument("--out", default=str(Path(__file__).parent / "results.json"))
    p.add_argument("--only", nargs="*", choices=FAMILIES, help="run only these families")
    args = p.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    families = set(args.only or FAMILIES)
    started = time.perf_counter()
    rows = collect(cfg, families, args.quick, set(args.only or ()))
    seconds = time.perf_counter() - started
    info = machine()
    print_table(rows, info, seconds)
    command = " ".join(["python -m benchmarks", *(argv if argv is not None else sys.argv[1:])])
    prov = provenance(command)
    if args.only:
        prov["only"] = " ".join(args.only)
    # the baselines and conditions of the step-level rows, for the generated tables
    prov["notes"] = [f"{r.case}: {r.note}" for r in rows if r.note and r.family in NOTED]
    out = {"schema": "parity.benchmarks/1", "provenance": prov, "quick": args.quick,
           "machine": info, "config": cfg,
           "seconds": round(seconds, 1), "rows": [r.as_json() for r in rows]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
