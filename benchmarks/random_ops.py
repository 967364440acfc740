"""The cost of a random op under ``jax_semantics()`` against plain torch's
random op (issue 25, item 1; issue 24, item 5).

One process, rank 0 of a ``fake`` process group of 4 (random ops need no
communication under any mode, so what a call costs is this rank's work), mesh
(2, 2) ``data, model``, a (512, 512) f32 operand sharded on both axes (each
rank's block (256, 256)). Per mode, ``rand_like`` and ``dropout(p=0.5)``:

* ``random="invariant"`` (the default): every rank draws the whole global
  tensor, as the unsharded program does, and keeps its block; the baseline
  is plain torch's op on the global tensor (the unsharded program's call);
* ``random="counter"``: each rank hashes only its block's indices
  (threefry); the baseline is plain torch's op on one rank's block (what a
  rank pays for its share with torch's own generator);
* ``random="per_rank"`` (torch's behaviour, each rank drawing its block from
  its own generator, through DTensor): the same block baseline.

Each figure is the best of 7 blocks of calls in this thread's CPU time
(nothing waits), parity's and the baseline's blocks alternating.

    python -m benchmarks.random_ops [--quick]      # prints JSON rows
"""

from __future__ import annotations

import functools
import json
import sys

from benchmarks.common import Row, child_records
from benchmarks.per_call import BLOCKS, best_pair

WORLD = 4
GLOBAL = (512, 512)


def _calls(fn, budget_s: float) -> int:
    """Calls per block: about ``budget_s`` CPU seconds of ``fn``, at least 3."""
    import time

    start = time.thread_time()
    fn()
    return max(3, int(budget_s / max(time.thread_time() - start, 1e-6)))


def measure(budget_s: float = 0.05, blocks: int = BLOCKS) -> list[dict]:
    """``[{"case", "parity_s", "raw_s", "baseline"}, ...]`` on a fresh fake group."""
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.testing._internal.distributed.fake_pg import FakeStore

    import parity
    from parity import torch_impl as ti

    torch.set_num_threads(1)
    dist.init_process_group("fake", rank=0, world_size=WORLD, store=FakeStore())
    try:
        mesh = parity.DeviceMesh((2, 2), ("data", "model"))
        host = np.random.default_rng(0).standard_normal(GLOBAL).astype(np.float32)
        a = ti.distribute_tensor(host, parity.TensorLayout(("data", "model"), mesh))
        whole, block = torch.from_numpy(host), a.to_local().clone()
        ops = {"rand_like": torch.rand_like, "dropout p=0.5": functools.partial(F.dropout, p=0.5)}
        found = []
        for mode, baseline in (("invariant", "global"), ("counter", "block"), ("per_rank", "block")):
            scope = functools.partial(ti.jax_semantics, random=mode)
            for name, op in ops.items():
                plain = whole if baseline == "global" else block
                with scope():
                    calls = _calls(lambda: op(a), budget_s)
                p, r = best_pair(lambda: op(a), lambda: op(plain), calls, blocks, scope)
                found.append({
                    "case": f"{name}, random={mode!r}, {GLOBAL[0]}x{GLOBAL[1]} f32 on (2, 2)",
                    "parity_s": p, "raw_s": r, "calls": calls,
                    "baseline": (f"plain torch {name} of the global {GLOBAL[0]}x{GLOBAL[1]} tensor"
                                 if baseline == "global" else
                                 f"plain torch {name} of one rank's {tuple(block.shape)} block")})
        return found
    finally:
        dist.destroy_process_group()


def rows(quick: bool = False) -> list[Row]:
    """The figures as benchmark rows, measured in a child process (the fake
    process group is process-wide). Raises ``subprocess.CalledProcessError``
    when the child fails."""
    out = []
    for data in child_records("benchmarks.random_ops", *(["--quick"] if quick else [])):
        out.append(Row("random", data["case"] + " (fake group, 4 ranks)", data["parity_s"],
                       data["raw_s"], note=f"vs {data['baseline']}; best of blocks of "
                       f"{data['calls']} calls (CPU time)"))
    return out


def main() -> None:
    quick = "--quick" in sys.argv[1:]
    for row in measure(0.005 if quick else 0.05, 2 if quick else BLOCKS):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
