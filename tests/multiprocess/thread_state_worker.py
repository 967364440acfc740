"""Collectives run while Python thread states come and go: the watchdog's
heartbeat must not read the thread list while gloo's threads add to it.

Each gloo collective issued under ``saved_tensors_hooks`` (what activation
checkpointing sets) makes gloo's worker thread copy the hooks, a Python
object, so it takes the GIL from a thread without a Python thread state:
CPython creates one and links it into the interpreter's thread list while
the worker runs. ``argv[1]`` is how many rounds of 8 all_reduce to run; every
rank prints ``rank R: N collectives in S s`` at the end.
"""

from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist

from parity import torch_impl as ti


def main() -> None:
    rounds = int(sys.argv[1])
    ti.initialize()
    rank = ti.process_id()
    x = torch.ones(64)
    count, started = 0, time.monotonic()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        for _ in range(rounds):
            works = [dist.all_reduce(x, async_op=True) for _ in range(8)]
            for work in works:
                work.wait()
            count += len(works)
    print(f"rank {rank}: {count} collectives in {time.monotonic() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
