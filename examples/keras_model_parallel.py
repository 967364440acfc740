"""Keras 3 ModelParallel on PyTorch through parity.

    python examples/keras_model_parallel.py                      # 8 simulated devices
    torchrun --nproc_per_node=4 examples/keras_model_parallel.py  # 4 real ranks (gloo)

The first five lines are all it takes; the rest is plain Keras distribution
code that runs unchanged on JAX.

The two commands print different losses, and both are right. On simulated
devices the one process passes every row, and each global batch is
consecutive rows of the whole array. Under torchrun each process passes only
the rows of its batch shard (``np.array_split`` by its position on the
``batch`` axis), as ``jax.make_array_from_process_local_data`` expects, so a
global batch joins rows from each shard's part: other rows per step, on
another mesh ((2, 2) instead of (2, 4)). To compare the two, compare the same
run on JAX and on torch, not one launcher with the other.
"""

import os
os.environ["KERAS_BACKEND"] = "torch"          # 1. Keras on torch
import keras                                    # 2.
from parity import torch_impl                   # 3.
torch_impl.install_keras()                      # 4. parity is Keras's distribution backend

import contextlib  # noqa: E402

import numpy as np  # noqa: E402

if "RANK" in os.environ:                        # 5. devices: torchrun ranks ...
    keras.distribution.initialize()
    devices_ready = contextlib.nullcontext()
else:                                           #    ... or 8 simulated ones
    devices_ready = torch_impl.simulate(8)

keras.utils.set_random_seed(0)  # same initial weights every run (and on every rank):
                                #    the printed losses are reproducible

with devices_ready:
    devices = keras.distribution.list_devices()
    mesh = keras.distribution.DeviceMesh((2, len(devices) // 2), ["batch", "model"], devices)
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map[".*dense_1/kernel"] = (None, "model")   # column-parallel
    layout_map[".*dense_1/bias"] = ("model",)
    layout_map[".*dense_2/kernel"] = ("model", None)   # row-parallel
    keras.distribution.set_distribution(
        keras.distribution.ModelParallel(
            layout_map=layout_map, batch_dim_name="batch",
            auto_shard_dataset="RANK" not in os.environ,
        )
    )

    model = keras.Sequential([
        keras.Input((16,)),
        keras.layers.Dense(64, activation="relu", name="dense_1"),
        keras.layers.Dense(8, name="dense_2"),
    ])
    model.compile(optimizer="adam", loss="mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 16)).astype("float32")
    y = rng.normal(size=(256, 8)).astype("float32")
    batch_size = 32  # global batch
    if "RANK" in os.environ:  # each process passes the rows of its batch shard
        batch_shards, group = mesh.shape[0], len(devices) // mesh.shape[0]
        shard = torch_impl.process_id() // group
        x, y = np.array_split(x, batch_shards)[shard], np.array_split(y, batch_shards)[shard]
        batch_size //= batch_shards
    history = model.fit(x, y, batch_size=batch_size, epochs=2, shuffle=False, verbose=0)

    kernel = model.get_layer("dense_1").kernel
    weights = model.get_weights()  # full values (a collective: every rank calls it)
    if torch_impl.process_id() == 0:
        print("losses:", [round(v, 4) for v in history.history["loss"]])
        print("dense_1/kernel:", torch_impl.describe(kernel.value).spec,
              "local block", tuple(torch_impl.local_block(kernel.value, 0).shape),
              "of", tuple(kernel.shape))
        print("get_weights():", [w.shape for w in weights])
