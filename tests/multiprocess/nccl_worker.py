"""Run under torchrun with one rank per GPU: NCCL picked by initialize(),
blocks on this rank's GPU, each collective against a numpy model."""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

import parity
from parity import torch_impl as ti


def main() -> None:
    ti.initialize()
    assert dist.get_backend() == "nccl", dist.get_backend()
    world, rank = ti.num_processes(), ti.process_id()
    assert ti.list_devices() == [f"gpu:{i}" for i in range(world)], ti.list_devices()
    mesh = parity.DeviceMesh((world,), ("x",))
    host = np.arange(8 * world * 4, dtype=np.float32).reshape(8 * world, 4)
    blocks = np.split(host, world, axis=0)

    x = ti.distribute_tensor(host, parity.TensorLayout(("x", None), mesh))
    assert x.to_local().device == torch.device("cuda", torch.cuda.current_device())
    np.testing.assert_array_equal(ti.to_numpy(x), host)

    summed = ti.all_reduce(x, "sum", axis_name="x")
    np.testing.assert_allclose(ti.to_numpy(summed), sum(blocks))
    assert ti.describe(summed).spec == ((), ())
    mean = ti.all_reduce(x, "mean", axis_name="x")
    np.testing.assert_allclose(ti.to_numpy(mean), sum(blocks) / world)
    gathered = ti.all_gather(x, 1, "x")
    np.testing.assert_array_equal(ti.to_numpy(gathered), np.concatenate(blocks, 1))
    scattered = ti.reduce_scatter(x, 0, "x")
    np.testing.assert_allclose(ti.to_numpy(scattered), sum(blocks))
    assert ti.describe(scattered).spec == (("x",), ())

    local = host[8 * rank: 8 * rank + 8]
    batch = ti.distribute_data_input(local, parity.TensorLayout(("x", None), mesh), "x")
    np.testing.assert_array_equal(ti.to_numpy(batch), host)
    dist.barrier()
    if rank == 0:
        print(f"nccl: ok on {world} rank(s), {torch.cuda.get_device_name(0)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
