"""One cache policy for values tied to a process group
(``parity.torch_impl.runtime.state.per_generation``): every registered cache
is emptied when the runtime generation changes -- a new ``simulate()``
block, a process group the user destroyed and started again -- and the
caches that hold torch meshes or groups are all registered."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from parity import torch_impl as ti
from parity.torch_impl.collectives import eager, flat_groups, relabel
from parity.torch_impl.layouts import meshes, tensors
from parity.torch_impl.runtime import state

ROOT = Path(__file__).resolve().parents[1]


class _Counted(dict):
    """A cache that counts how often it is emptied."""

    def __init__(self) -> None:
        super().__init__()
        self.cleared = 0

    def clear(self) -> None:
        self.cleared += 1
        super().clear()


def test_a_new_simulate_block_empties_every_registered_cache(monkeypatch):
    cache = _Counted()
    monkeypatch.setattr(state, "_clears", [*state._clears, cache.clear])
    with ti.simulate(2):
        cache["held"] = object()
        before = cache.cleared
        for _ in range(3):
            state.current()  # the same generation: nothing emptied
        assert cache.cleared == before and "held" in cache
    with ti.simulate(2):
        assert cache.cleared == before + 2  # leaving the first block, entering this one
        assert "held" not in cache


def test_the_caches_that_hold_meshes_or_groups_are_registered():
    registered = set(state._clears)
    for clear in (meshes._mesh_cache.clear, meshes._parity_mesh_cache.clear,
                  eager._forget_plans, flat_groups._entries.clear, relabel._specs.clear,
                  tensors._result_spec.cache_clear, state.clear_sharding_caches):
        assert clear in registered, clear


def test_a_user_process_group_started_again_empties_the_caches():
    # One gloo rank in a child process (the process group is process-wide).
    script = textwrap.dedent("""
        import json
        import torch.distributed as dist
        from parity.torch_impl.runtime import state

        held = {}
        state.per_generation(held.clear)
        def start():
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        start()
        state.current()
        held["x"] = 1
        state.current()
        kept = "x" in held
        dist.destroy_process_group()
        start()
        state.current()
        print(json.dumps({"kept_within": kept, "emptied_after": "x" not in held}))
        dist.destroy_process_group()
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"kept_within": True, "emptied_after": True}
