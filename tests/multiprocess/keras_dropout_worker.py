"""Run under torchrun with 4 gloo ranks (issue 25): a Keras model with
``Dropout`` (one unseeded, one seeded) trained 2 steps under ``ModelParallel``
on a (2, 2) ``("batch", "model")`` mesh ends with the weights of the same
model trained in one plain process after the same seed, and
``keras.random`` with a ``SeedGenerator`` made under the distribution,
called outside a train step, draws the plain values.

Each rank first trains the reference on plain tensors (before the ranks are
initialized: one process, no distribution, the whole batch), then the
distributed model: each process passes its own rows of the global batch
(ranks 0-1 the first half, 2-3 the second), which the trainer assembles
into the global batch split on "batch". The hidden activations are split on
"batch" and "model": each rank holds a block of every dropout mask. Exits
non-zero on the first mismatch, else prints ``rank N: ok``.
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "torch"

import numpy as np  # noqa: E402

import keras  # noqa: E402
from keras import distribution as kd  # noqa: E402

from parity import torch_impl as ti  # noqa: E402
from parity.torch_impl.keras import distribution_lib as kdl  # noqa: E402

STEPS = 2


def build():
    inputs = keras.Input((8,))
    h = keras.layers.Dense(16, activation="relu", name="d1")(inputs)
    h = keras.layers.Dropout(0.5, name="drop")(h)
    h = keras.layers.Dense(16, activation="relu", name="d2")(h)
    h = keras.layers.Dropout(0.3, seed=4, name="drop_seeded")(h)
    model = keras.Model(inputs, keras.layers.Dense(4, name="d3")(h))
    model.compile(optimizer="sgd", loss="mse")
    return model


def train(x, y):
    keras.utils.set_random_seed(1)
    model = build()
    for _ in range(STEPS):
        model.train_on_batch(x, y)
    return model, [keras.ops.convert_to_numpy(v.value) for v in model.weights]


def this_process_rows(data: np.ndarray, rank: int) -> np.ndarray:
    """This process's rows of the global batch: ranks 0-1 (batch shard 0 of
    the (2, 2) mesh) the first half, ranks 2-3 the second."""
    per = len(data) // 2
    return data[(rank // 2) * per:(rank // 2 + 1) * per]


def draws():
    generator = keras.random.SeedGenerator(3)  # a variable: a DTensor under the distribution
    return [keras.ops.convert_to_numpy(keras.random.normal((4, 8), seed=generator)),
            keras.ops.convert_to_numpy(keras.random.uniform((4, 8), seed=generator)),
            keras.ops.convert_to_numpy(keras.random.dropout(keras.ops.ones((4, 8)), 0.5,
                                                            seed=generator))]


def main() -> None:
    ti.install_keras()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 8)).astype("float32")
    y = rng.normal(size=(16, 4)).astype("float32")
    (_, expected), expected_draws = train(x, y), draws()
    kd.initialize()
    rank = ti.process_id()
    mesh = kd.DeviceMesh((2, 2), ("batch", "model"), kd.list_devices())
    layout_map = kd.LayoutMap(mesh)
    layout_map["d1/kernel"] = (None, "model")
    layout_map["d1/bias"] = ("model",)
    layout_map["d2/kernel"] = ("model", None)
    layout_map["d3/kernel"] = (None, "model")
    distribution = kd.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
    with distribution.scope():
        batch = kdl.distribute_data_input(this_process_rows(x, rank),
                                          distribution.get_data_layout(x.shape))
        assert tuple(ti.describe(batch).spec) == (("batch",), ()), ti.describe(batch)
        np.testing.assert_array_equal(ti.to_numpy(batch), x)  # the global batch, split
        model, got = train(this_process_rows(x, rank), this_process_rows(y, rank))
        got_draws = draws()
    hidden = ti.describe(model.get_layer("d1").kernel.value).spec
    assert tuple(hidden) == ((), ("model",)), hidden  # the dropped activations: (batch, model)
    for name, a, b in zip(("normal", "uniform", "dropout"), got_draws, expected_draws):
        np.testing.assert_array_equal(a, b, err_msg=f"keras.random.{name}")
    for i, (a, b) in enumerate(zip(got, expected)):
        # the sharded matmuls sum in another order: float32 rounding only
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"weight {i}")
    print(f"rank {rank}: ok", flush=True)


if __name__ == "__main__":
    main()
