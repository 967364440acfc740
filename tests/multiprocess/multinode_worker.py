"""Worker for tests/test_multinode.py. ``argv[1]`` picks what to run:

* ``api``: under ``torchrun --nnodes=2 --nproc_per_node=2`` (two "nodes" on
  loopback): the whole api_worker check (distribute, every collective, data
  input) on the 4 ranks of the two nodes, plus which node each rank is on.
* ``keras-env``: a plain process started with only Keras's
  ``KERAS_DISTRIBUTION_*`` variables (no torchrun ones): ``initialize()``
  must read them.
* ``keras-dp``: under the two-node torchrun, Keras ``DataParallel`` through
  ``parity.torch_impl.install_keras``: one fit step on each process's own
  slice of the batch; every rank must end with the same weights.
"""

from __future__ import annotations

import os
import sys

import numpy as np


def api() -> None:
    sys.path.insert(0, os.path.dirname(__file__))
    import api_worker

    api_worker.main()
    print(f"rank {os.environ['RANK']}: node {os.environ['GROUP_RANK']} ok", flush=True)


def keras_env() -> None:
    import torch

    from parity import torch_impl as ti

    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        assert name not in os.environ, name
    ti.initialize()
    n, me = ti.num_processes(), ti.process_id()
    assert n == int(os.environ["KERAS_DISTRIBUTION_NUM_PROCESSES"]), n
    assert me == int(os.environ["KERAS_DISTRIBUTION_PROCESS_ID"]), me
    t = torch.tensor([float(me + 1)])
    torch.distributed.all_reduce(t)
    assert t.item() == n * (n + 1) / 2, t
    print(f"process {me} of {n}: ok", flush=True)


def keras_dp() -> None:
    os.environ["KERAS_BACKEND"] = "torch"
    import keras
    import torch

    from parity import torch_impl as ti

    ti.install_keras()
    keras.distribution.initialize()
    rank, world = ti.process_id(), ti.num_processes()
    assert world == 4, world
    keras.distribution.set_distribution(
        keras.distribution.DataParallel(devices=keras.distribution.list_devices(),
                                        auto_shard_dataset=False))
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 8)).astype("float32")
    y = rng.standard_normal((16, 4)).astype("float32")
    mine = slice(4 * rank, 4 * rank + 4)  # each process passes its own slice
    model.fit(x[mine], y[mine], batch_size=4, epochs=1, shuffle=False, verbose=0)
    kernel = torch.from_numpy(np.ascontiguousarray(model.layers[-1].kernel.numpy()))
    gathered = [torch.empty_like(kernel) for _ in range(world)]
    torch.distributed.all_gather(gathered, kernel)
    for other in gathered:
        np.testing.assert_allclose(other.numpy(), kernel.numpy(), rtol=1e-6)
    print(f"rank {rank}: keras DataParallel ok", flush=True)


if __name__ == "__main__":
    {"api": api, "keras-env": keras_env, "keras-dp": keras_dp}[sys.argv[1]]()
