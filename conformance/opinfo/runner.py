"""Whole-``op_db`` runs of the OpInfo harness, with a time limit per case.

The cases run in a worker process (``python -m conformance.opinfo.runner
--worker``, inside ``simulate(8)``) that this process feeds one op at a time
and watches: a case that runs past ``timeout`` seconds, or a worker that
dies, is recorded as ``raw-error`` (``Timeout`` / ``Crash``), the worker is
restarted and the op resumes at the next case, so a run never hangs.

    python -m conformance.opinfo.runner [--full] [--op cumsum ...] [--mesh 2x4]
                                        [--timeout 30] --out opinfo.json
    parity run --backend torch --source opinfo --out opinfo.json   # the same

Report file (``schema: "parity-opinfo/1"``)::

    {"schema": "parity-opinfo/1",
     "header": {"torch": "2.13.0+cpu", "budget": "fast", "meshes": ["2x4", "2x2x2"],
                "modes": [...], "columns": ["parity", "dtensor"], "shape_policy": {...},
                "timeout_s": 30, "ops": 677, "ops_finished": 677, "seconds": 812.4,
                "interrupted": false},
     "summary": {column: {mode: {mesh: {class: count}}}},
     "totals":  {column: {mode: {class: count}}},       # summed over meshes
     "cases":   [record, ...]}                          # conformance.opinfo.harness's records
"""

from __future__ import annotations

import argparse
import difflib
import importlib.metadata
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.opinfo.check import CLASSES, COLUMNS, MODES
from conformance.opinfo.harness import FAST, FULL, op_cases, print_table, summarize
from conformance.opinfo.samples import MESHES, SHAPE_POLICY, float32_ops, op_key
from conformance.running.worker_log import WorkerLog
from conformance.running.worker_process import LineWorker, WorkerGone, exit_with_parent

SCHEMA = "parity-opinfo/1"
READY_TIMEOUT_S = 300.0
SETUP_TIMEOUT_S = 180.0  # sample generation and references of one op
MAX_LOSSES_PER_OP = 3  # timeouts/crashes before the rest of an op is abandoned


class _Worker(LineWorker):
    """The OpInfo worker process (``--worker``); ``ops`` is its op list."""

    def __init__(self, log) -> None:
        super().__init__([sys.executable, "-m", "conformance.opinfo.runner", "--worker"],
                         dict(os.environ, OMP_NUM_THREADS="1"), log, READY_TIMEOUT_S)
        self.ops = self.ready["ops"]


def run_opinfo(names: Sequence[str] = (), *, full: bool = False,
               meshes: Sequence[str] = ("2x4", "2x2x2"), modes: Sequence[str] = MODES,
               columns: Sequence[str] = COLUMNS, timeout: float = 30.0,
               out: str | Path | None = None, progress: bool = True,
               limit: int | None = None) -> dict[str, Any]:
    """Run the harness over ``names`` (every float32 op when empty; ``limit``:
    the first N ops) in a watched worker; the report dict (written to ``out``
    when given, also after Ctrl-C, marked ``interrupted``).

    Raises ``ValueError`` for a timeout <= 0 or a limit < 1, ``KeyError``
    for an unknown op name, mesh, mode or column (from the worker's first
    request), ``RuntimeError`` when the worker cannot start.
    """
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    for m in meshes:
        if m not in MESHES:
            raise KeyError(f"unknown mesh {m!r}; OpInfo meshes: {sorted(MESHES)}")
    worker_log = WorkerLog(out)  # <out>.log, kept only when a worker said something
    log = worker_log.file
    started = time.monotonic()
    records = _Journal(Path(str(out) + ".partial.jsonl") if out else None)
    interrupted = False
    request = {"budget": "full" if full else "fast", "meshes": list(meshes),
               "modes": list(modes), "columns": list(columns)}
    keys: list[str] = []
    finished = 0
    worker: _Worker | None = None

    def on_term(signum, frame):  # SIGTERM (and SIGINT in a background job): finish
        raise KeyboardInterrupt

    old_handlers = {sig: signal.signal(sig, on_term) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        worker = _Worker(log)
        keys = worker.ops if not names else _resolve(worker.ops, names)
        keys = keys[:limit] if limit else keys
        for n, key in enumerate(keys):
            start, losses = 0, 0
            while start is not None:
                if worker is None:
                    worker = _Worker(log)
                worker, start = _run_op(worker, key, start, request, timeout, records)
                losses += worker is None
                if losses >= MAX_LOSSES_PER_OP and start is not None:
                    records.append(_op_error(key, f"abandoned after {losses} timeouts or "
                                                  f"crashes; its remaining cases did not run"))
                    break
            finished += 1
            if progress:
                print(f"\r[{n + 1}/{len(keys)}] {len(records)} cases, "
                      f"{time.monotonic() - started:.0f} s  {key[:40]:40}",
                      end="", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        interrupted = True
    except BaseException:
        records.close(remove=not records)  # an empty journal says nothing: not left behind
        raise
    finally:
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
        if worker is not None:
            worker.kill()
        worker_log.close()
        if progress:
            print(file=sys.stderr)
    summary = summarize(list(records))
    report = {"schema": SCHEMA,
              "header": {"torch": _torch_version(), "budget": request["budget"],
                         "meshes": list(meshes), "modes": list(modes),
                         "columns": list(columns), "shape_policy": SHAPE_POLICY,
                         "timeout_s": timeout, "ops": len(keys), "ops_finished": finished,
                         "seconds": round(time.monotonic() - started, 1),
                         "interrupted": interrupted},
              "summary": summary, "totals": totals(summary), "cases": list(records)}
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(report, separators=(",", ":")))
    records.close(remove=bool(out))
    return report


class _Journal(list):
    """The records, each also appended to a JSON-lines file as it arrives, so
    a run killed outright still leaves what it finished (removed once the
    report is written)."""

    def __init__(self, path: Path | None) -> None:
        super().__init__()
        self.path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(path, "w") if path is not None else None

    def append(self, record: dict) -> None:
        super().append(record)
        if self.file is not None:
            self.file.write(json.dumps(record, default=str) + "\n")
            self.file.flush()

    def close(self, remove: bool) -> None:
        if self.file is not None:
            self.file.close()
            if remove:
                self.path.unlink()


def _resolve(available: Sequence[str], names: Sequence[str]) -> list[str]:
    """The OpInfo keys ``names`` select (a name selects its variants too).
    Raises ``KeyError`` naming each unknown name with the closest known ones."""
    chosen = [k for k in available if k in names or k.split(".")[0] in names]
    known = set(available) | {k.split(".")[0] for k in available}
    unknown = [n for n in names if n not in known]
    if unknown:
        def hint(name: str) -> str:
            near = difflib.get_close_matches(name, sorted(known), n=3)
            return f"did you mean {' or '.join(near)}?" if near else "no OpInfo has a close name"
        raise KeyError("; ".join(f"no float32 OpInfo named {n!r}: {hint(n)}" for n in unknown))
    return chosen


def _run_op(worker: _Worker, key: str, start: int, request: dict, timeout: float,
            records: list) -> tuple[_Worker | None, int | None]:
    """Feed one op from case ``start``; ``(worker, None)`` when it finished,
    ``(None, next_start)`` after a timeout or crash (the worker is gone)."""
    current = None
    try:
        worker.send({**request, "op": key, "start": start})
        while True:
            msg = worker.read(timeout if current else SETUP_TIMEOUT_S)
            if msg is None:
                worker.kill()
                limit = timeout if current else SETUP_TIMEOUT_S
                return None, _lost(key, current, records, "Timeout",
                                   f"exceeded the {limit:g} s limit; worker killed and restarted")
            if "begin" in msg:
                current = msg["begin"]
            elif "record" in msg:
                records.append(msg["record"])
                current = None
            elif "error" in msg:
                raise KeyError(msg["error"])
            elif msg.get("done") == key:
                return worker, None
    except WorkerGone as gone:
        return None, _lost(key, current, records, "Crash", f"{gone}; worker restarted")


def _lost(key: str, current: dict | None, records: list, kind: str, message: str) -> int | None:
    """Record the case that timed out or crashed; the index to resume at
    (``None``: the op's setup itself failed, go on with the next op)."""
    if current is None:
        records.append(_op_error(key, f"setup: {kind}: {message}"))
        return None
    records.append({**current, "class": "raw-error", "reason": f"{kind}: {message}"})
    return current["index"] + 1


def _op_error(key: str, reason: str) -> dict[str, Any]:
    """An op-level ``raw-error`` record (no column: counts in every column)."""
    return {"op": key, "sample": None, "mesh": None, "layout": None, "specs": [],
            "mode": None, "column": None, "class": "raw-error", "reason": reason,
            "seconds": 0.0, "shapes": [], "call": None, "shape_policy": None, "index": None}


def totals(summary: dict) -> dict:
    """``{column: {mode: {class: n}}}``: ``summary`` summed over meshes."""
    out: dict = {}
    for column, modes in summary.items():
        for mode, meshes in modes.items():
            cell = out.setdefault(column, {}).setdefault(mode, {c: 0 for c in CLASSES})
            for counts in meshes.values():
                for cls, n in counts.items():
                    cell[cls] += n
    return out


def _torch_version() -> str:
    return importlib.metadata.version("torch")


def _worker_main() -> int:
    """Serve requests: one op each, one line per case begun and finished."""
    exit_with_parent()
    results = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import torch

    from parity import torch_impl as ti

    torch.set_num_threads(1)
    ops = {op_key(o): o for o in float32_ops()}
    hang_on = os.environ.get("PARITY_OPINFO_HANG_ON")  # test hook: "op:index" sleeps

    def begin(rec: dict) -> None:
        results.write(json.dumps({"begin": rec}) + "\n")
        if hang_on == f"{rec['op']}:{rec['index']}":
            time.sleep(3600)

    results.write(json.dumps({"ready": True, "ops": list(ops)}) + "\n")
    with ti.simulate(8):
        for line in sys.stdin:
            if not line.strip():
                continue
            req = json.loads(line)
            op = ops.get(req["op"])
            if op is None:
                results.write(json.dumps({"error": f"unknown op {req['op']!r}"}) + "\n")
                continue
            budget = FULL if req["budget"] == "full" else FAST
            try:
                for rec in op_cases(op, budget=budget, meshes=req["meshes"], modes=req["modes"],
                                    columns=req["columns"], start=req["start"],
                                    on_begin=begin):
                    results.write(json.dumps({"record": rec}, default=str) + "\n")
            except KeyError as err:  # unknown mode/column/mesh: the request is wrong
                results.write(json.dumps({"error": str(err)}) + "\n")
                continue
            results.write(json.dumps({"done": req["op"]}) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="conformance.opinfo.runner",
                                     description="PyTorch OpInfo samples on sharded DTensors")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--full", action="store_true",
                        help="every scheme and up to 12 samples per op (default: 2 + 1 grad)")
    parser.add_argument("--op", action="append", default=[], metavar="NAME")
    parser.add_argument("--mesh", action="append", default=[], metavar="2x4")
    parser.add_argument("--column", action="append", default=[], choices=COLUMNS)
    parser.add_argument("--mode", action="append", default=[], choices=MODES)
    parser.add_argument("--limit", type=int, metavar="N", help="only the first N ops")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per case")
    parser.add_argument("--out", metavar="R.json")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.worker:
        return _worker_main()
    report = run_opinfo(args.op, full=args.full, meshes=args.mesh or ("2x4", "2x2x2"),
                        modes=args.mode or MODES, columns=args.column or COLUMNS,
                        timeout=args.timeout, out=args.out, progress=not args.quiet,
                        limit=args.limit)
    print_report(report)
    return 130 if report["header"]["interrupted"] else 0


def cli_run(args) -> int:
    """``parity run --source opinfo``: the run's arguments mapped onto
    ``run_opinfo`` (``--op``, ``--mesh``, ``--limit`` = first N ops,
    ``--timeout`` per case, ``--full``; ``--raw`` = the dtensor column only).
    Exit 2 with one line for what does not apply; 130 when interrupted."""
    def refuse(message: str) -> int:
        print(f"parity run --source opinfo: {message}", file=sys.stderr)
        return 2

    if args.backend != "torch":
        return refuse("the OpInfo source is torch's own (use --backend torch)")
    if args.cases or args.pattern or args.device != "cpu":
        return refuse("--cases, -k and --device cuda do not apply (use --op / --mesh)")
    if args.mesh and args.mesh not in MESHES:
        return refuse(f"mesh {args.mesh!r}: OpInfo meshes are {sorted(MESHES)}")
    if args.limit is not None and args.limit < 1:
        return refuse(f"--limit must be >= 1 (first N ops), got {args.limit}")
    if args.timeout <= 0:
        return refuse(f"--timeout must be > 0 seconds, got {args.timeout}")
    try:
        report = run_opinfo(args.op, full=args.full,
                            meshes=(args.mesh,) if args.mesh else tuple(MESHES),
                            columns=("dtensor",) if args.raw else COLUMNS,
                            timeout=args.timeout, out=args.out, limit=args.limit,
                            progress=not args.quiet and sys.stderr.isatty())
    except KeyError as err:
        return refuse(str(err.args[0]))
    print_report(report)
    print(f"-> {args.out}")
    return 130 if report["header"]["interrupted"] else 0


def print_report(report: dict, file=None) -> None:
    """The per-mesh table, the totals and the non-correct cases of the
    parity column (op, sample, mesh, layout, mode, class, reason)."""
    file = file or sys.stdout
    h = report["header"]
    print(f"OpInfo harness: {h['ops_finished']} of {h['ops']} ops, {len(report['cases'])} "
          f"records, {h['seconds']} s "
          f"({h['budget']})" + (" INTERRUPTED" if h["interrupted"] else ""), file=file)
    print_table(report["summary"], file=file)
    print(file=file)
    print_table({c: {m: {"all": cell} for m, cell in modes.items()}
                 for c, modes in report["totals"].items()}, file=file)
    bad = [r for r in report["cases"] if r["column"] in ("parity", None)
           and r["class"] in ("wrong-values", "wrong-grad-placement", "leaked-partial")]
    if bad:
        print(f"\nparity column, {len(bad)} silent-failure cases:", file=file)
        for r in bad:
            print(f"  {r['op']}{r.get('call') or ''} sample {r['sample']} {r['mesh']} "
                  f"{r['layout']} {r['specs']} {r['mode']}: {r['class']}: {r['reason']}",
                  file=file)


if __name__ == "__main__":
    sys.exit(main())
