"""Per-rank bytes of a sharded variable against global bytes / N (goal:
within 1%): the bytes of each rank's local *storage* (a view into a bigger
buffer would count the whole buffer), largest rank against the even share.
"""

from __future__ import annotations

import numpy as np

from benchmarks.common import Row, rank_max

GOAL = 1.01
SHAPE = (1024, 1024)


def _storage_bytes(block) -> int:
    return block.untyped_storage().nbytes()


def _shares(layout) -> int:
    mesh = layout.device_mesh
    return int(np.prod([mesh.axis_size(n) for names in layout.spec for n in names])) if any(
        layout.spec) else 1


def on_rank(cfg: dict) -> list[Row]:
    """Real ranks: each measures its own block; the largest counts."""
    import torch.distributed as dist

    import parity
    from parity import torch_impl as ti

    world = dist.get_world_size()
    mesh = parity.DeviceMesh((world // 2, 2) if world % 2 == 0 else (world, 1), ("data", "model"))
    host = np.ones(SHAPE, np.float32)
    rows = []
    for axes in [("data", "model"), (("data", "model"), None)]:
        layout = parity.TensorLayout(axes, mesh)
        v = ti.distribute_variable(host, layout)
        mine = _storage_bytes(ti.local_block(v, ti.process_id()))
        (largest,) = rank_max([float(mine)])
        rows.append(Row("memory", f"variable {SHAPE} {axes} on {world} gloo ranks", largest,
                        host.nbytes / _shares(layout), unit="B", goal=GOAL,
                        note="largest rank's storage vs global/N"))
    return rows


def simulated(cfg: dict) -> list[Row]:
    """Eight simulated ranks: every rank's block is visible in one process."""
    import parity
    from parity import torch_impl as ti

    rows = []
    host = np.ones(SHAPE, np.float32)
    with ti.simulate(8):
        mesh = parity.DeviceMesh((2, 4), ("data", "model"))
        for axes in [("data", "model"), ("model", "data"), (("model", "data"), None), ("data", None)]:
            layout = parity.TensorLayout(axes, mesh)
            v = ti.distribute_variable(host, layout)
            largest = max(_storage_bytes(ti.local_block(v, i)) for i in range(8))
            rows.append(Row("memory", f"variable {SHAPE} {axes} on 8 simulated ranks", largest,
                            host.nbytes / _shares(layout), unit="B", goal=GOAL,
                            note="largest rank's storage vs global/N (N = shard count)"))
    return rows
