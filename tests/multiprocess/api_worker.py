"""Run under torchrun with 4 gloo ranks: distribute, each collective, data input.

Each rank checks its own block against a numpy model and exits non-zero on
the first mismatch.
"""

from __future__ import annotations

import numpy as np

import parity
from parity import torch_impl as ti


def block_of(host, layout, device):
    bounds = layout.shards(host.shape)[device]
    return host[tuple(slice(a, b) for a, b in bounds)]


def main() -> None:
    ti.initialize()
    assert ti.num_processes() == 4, ti.num_processes()
    assert ti.list_devices() == [f"cpu:{i}" for i in range(4)]
    rank = ti.process_id()  # also the device index: the mesh lists cpu:0..3 in order
    mesh = parity.DeviceMesh((2, 2), ("data", "model"))
    host = np.arange(64, dtype=np.float32).reshape(8, 8)

    for spec in [(("data",), ("model",)), (("model", "data"), ()), ((), ("data", "model"))]:
        layout = parity.TensorLayout.from_spec(spec, mesh)
        x = ti.distribute_tensor(host, layout)
        np.testing.assert_array_equal(ti.local_block(x, rank).numpy(), block_of(host, layout, rank))
        np.testing.assert_array_equal(ti.to_numpy(x), host)
        assert ti.describe(x).shards == layout.shards(host.shape)

    layout = parity.TensorLayout(("data", "model"), mesh)
    x = ti.distribute_tensor(host, layout)
    mine = block_of(host, layout, rank)
    model_peer = block_of(host, layout, rank ^ 1)  # same data coordinate
    data_peer = block_of(host, layout, rank ^ 2)  # same model coordinate

    summed = ti.all_reduce(x, "sum", axis_name="model")
    np.testing.assert_allclose(ti.local_block(summed, rank).numpy(), mine + model_peer)
    assert ti.describe(summed).spec == (("data",), ())
    largest = ti.all_reduce(x, "max", axis_name="data")
    np.testing.assert_allclose(ti.local_block(largest, rank).numpy(), np.maximum(mine, data_peer))
    mean = ti.all_reduce(x, "mean", axis_name="data")
    np.testing.assert_allclose(ti.local_block(mean, rank).numpy(), (mine + data_peer) / 2)

    gathered = ti.all_gather(x, 1, "model")
    in_order = [mine, model_peer] if rank % 2 == 0 else [model_peer, mine]
    np.testing.assert_array_equal(ti.local_block(gathered, rank).numpy(), np.concatenate(in_order, 1))

    scattered = ti.reduce_scatter(x, 0, "data")
    chunk = np.split(mine + data_peer, 2, axis=0)[rank // 2]
    np.testing.assert_allclose(ti.local_block(scattered, rank).numpy(), chunk)
    assert ti.describe(scattered).spec == (("data",), ("model",))
    scattered_mean = ti.reduce_scatter(x, 1, "model", op="mean")
    chunk = np.split((mine + model_peer) / 2, 2, axis=1)[rank % 2]
    np.testing.assert_allclose(ti.local_block(scattered_mean, rank).numpy(), chunk)
    assert ti.describe(scattered_mean).spec == (("data",), ("model",))

    # Donation: all_reduce reduces the donor's own buffer; the donor is then invalid.
    donor = ti.distribute_tensor(host, layout)
    buffer = donor.to_local()
    donated = ti.all_reduce(donor, "sum", axis_name="model", donate=True)
    assert donated.to_local().data_ptr() == buffer.data_ptr()
    np.testing.assert_allclose(ti.local_block(donated, rank).numpy(), mine + model_peer)
    try:
        ti.to_numpy(donor)
    except parity.errors.DonatedArrayError:
        pass
    else:
        raise AssertionError("a donated tensor was read")

    # Donated all_gather and reduce_scatter in turn (dim 0, over "data"): the
    # second round gathers into the first round's donated output; values hold.
    current, gathered_at = ti.distribute_tensor(host, layout), []
    for round_ in range(2):
        gathered = ti.all_gather(current, 0, "data", donate=True)
        gathered_at.append(gathered.to_local().data_ptr())
        np.testing.assert_array_equal(ti.to_numpy(gathered), host * 2**round_)
        current = ti.reduce_scatter(gathered, 0, "data", donate=True)  # the data peers' sum
        np.testing.assert_array_equal(ti.to_numpy(current), host * 2 ** (round_ + 1))
        assert ti.describe(current).spec == (("data",), ("model",))
    assert gathered_at[0] == gathered_at[1], gathered_at

    # Data input: each process passes its data shard; ranks 0 and 1 share one.
    global_batch = np.arange(12, dtype=np.float32).reshape(4, 3)
    local_batch = global_batch[2 * (rank // 2) : 2 * (rank // 2) + 2]
    batch = ti.distribute_data_input(local_batch, parity.TensorLayout(("data", None), mesh), "data")
    assert tuple(batch.shape) == (4, 3)
    np.testing.assert_array_equal(ti.to_numpy(batch), global_batch)
    print(f"rank {rank}: ok", flush=True)


if __name__ == "__main__":
    main()
