"""The worker: one backend, one process; a case per stdin line, a result per
stdout line. ``runner`` watches it (time limit, crashes) and restarts it.

    python -m conformance.running.worker --backend jax|torch [--raw | --compile aot_eager]
                                 --devices 8 [--device cpu]

The first line out is ``{"ready": true, "facts": {...}}`` (header facts).
Anything the backends print goes to stderr, so stdout carries only results.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from conformance.reports.compiled import compile_header
from conformance.running import run_jax  # imports JAX only when a case runs
from conformance.running.worker_process import exit_with_parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="conformance.running.worker")
    parser.add_argument("--backend", choices=("jax", "torch"), required=True)
    parser.add_argument("--raw", action="store_true")
    parser.add_argument("--compile", metavar="BACKEND",
                        help="torch: each op inside torch.compile with this dynamo backend")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)

    exit_with_parent()
    results = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints from the backends go to stderr
    sys.stdout = sys.stderr

    if args.backend == "jax":
        facts = run_jax.setup(args.devices, args.device)
        runner = run_jax.JaxRunner(args.devices, args.device)
        stack = None
    else:
        from conformance.running import run_torch  # imports torch

        stack, facts = run_torch.setup(args.devices, args.device, raw=args.raw)
        if args.compile:
            from conformance.running.run_compiled import CompiledTorchRunner

            runner = CompiledTorchRunner(args.devices, args.device, backend=args.compile)
            facts["compile"] = compile_header(args.compile)
        else:
            runner = run_torch.TorchRunner(args.devices, args.device, raw=args.raw)
    # Test hooks: make one case hang or crash the worker, to prove the watchdog.
    hang_on = os.environ.get("PARITY_CONFORMANCE_HANG_ON")
    crash_on = os.environ.get("PARITY_CONFORMANCE_CRASH_ON")
    results.write(json.dumps({"ready": True, "facts": facts}) + "\n")
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            case = json.loads(line)
            if case["id"] == hang_on:
                time.sleep(3600)
            if case["id"] == crash_on:
                os.abort()
            entry = runner.run(case)
            results.write(json.dumps({"id": case["id"], **entry}, separators=(",", ":")) + "\n")
    finally:
        if stack is not None:
            stack.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
