"""Keras's seeded random ops under a distribution over 8 simulated ranks, on
the (2, 4) and (2, 2, 2) meshes (issue 25), run by ``tests/test_keras_random.py`` with
``KERAS_BACKEND=torch``: every ``keras.random`` op and ``Dropout`` (seeded
by an int, by a ``SeedGenerator`` made under the distribution, or unseeded)
called inside a ``ModelParallel`` scope but outside any train step gives
every rank the values plain Keras gives in one process after the same seed.
Prints ``ok <name>`` per op; raises on the first mismatch.
"""

from __future__ import annotations

import os
import warnings

os.environ.setdefault("KERAS_BACKEND", "torch")
warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402

import keras  # noqa: E402
import torch  # noqa: E402
from keras import distribution as kd  # noqa: E402

from parity import torch_impl as ti  # noqa: E402

OPS = {
    "normal": lambda s: keras.random.normal((8, 4), seed=s),
    "uniform": lambda s: keras.random.uniform((8, 4), seed=s),
    "randint": lambda s: keras.random.randint((8, 4), 0, 9, seed=s),
    "truncated_normal": lambda s: keras.random.truncated_normal((8, 4), seed=s),
    "categorical": lambda s: keras.random.categorical(keras.ops.ones((4, 5)), 3, seed=s),
    "shuffle": lambda s: keras.random.shuffle(keras.ops.arange(8), seed=s),
    "gamma": lambda s: keras.random.gamma((8, 4), 2.0, seed=s),
    "dropout": lambda s: keras.random.dropout(keras.ops.ones((8, 4)), 0.5, seed=s),
    # the layer takes an int and makes its own SeedGenerator (a variable)
    "Dropout": lambda s: keras.layers.Dropout(0.5, seed=s if not isinstance(
        s, keras.random.SeedGenerator) else 3)(keras.ops.ones((8, 4)), training=True),
}
SEEDS = {
    "int": lambda: 3,
    "SeedGenerator": lambda: keras.random.SeedGenerator(3),  # a DTensor variable in scope
    "unseeded": lambda: None,
}


def per_rank(value) -> list[np.ndarray]:
    """Every rank's copy of a plain (simulated: LocalTensor) result."""
    local = getattr(value, "_local_tensors", None)
    if local is None:
        return [keras.ops.convert_to_numpy(value)]
    return [t.numpy() for _, t in sorted(local.items())]


def draw(op, seed_kind):
    keras.utils.set_random_seed(5)
    seed = SEEDS[seed_kind]()
    return op(seed), op(seed)  # a SeedGenerator / the global one advances


# (mesh shape, axis names, shape and layout of the sharded input)
MESHES = [
    ((2, 4), ("batch", "model"), (8, 16), ("batch", "model")),
    ((2, 2, 2), ("batch", "model", "seq"), (8, 4, 16), ("batch", "seq", "model")),
]


def check_mesh(expected, shape, names, x_shape, layout) -> None:
    """Every op on every simulated rank of one mesh, then ``Dropout`` of an
    input laid out as ``layout``; prints ``ok <mesh> <name>`` per check."""
    tag = "x".join(map(str, shape))
    with ti.simulate(8):
        mesh = kd.DeviceMesh(shape, names, kd.list_devices())
        distribution = kd.ModelParallel(layout_map=kd.LayoutMap(mesh), batch_dim_name="batch")
        with distribution.scope():
            for (name, kind), want in expected.items():
                for i, (value, ref) in enumerate(zip(draw(OPS[name], kind), want)):
                    for rank, got in enumerate(per_rank(value)):
                        np.testing.assert_array_equal(
                            got, ref, err_msg=f"{tag} {name} seed={kind} call {i} rank {rank}")
                print(f"ok {tag} {name} seed={kind}", flush=True)
            # a sharded input: the mask is laid out as the input
            keras.utils.set_random_seed(5)
            x = np.random.default_rng(0).normal(size=x_shape).astype("float32")
            sharded = kd.distribute_tensor(x, kd.TensorLayout(layout, mesh))
            got = keras.layers.Dropout(0.5, seed=7)(sharded, training=True)
            assert tuple(ti.describe(got).spec) == tuple((a,) for a in layout), ti.describe(got)
            got = ti.to_numpy(got)
    keras.utils.set_random_seed(5)
    want = keras.ops.convert_to_numpy(keras.layers.Dropout(0.5, seed=7)(torch.from_numpy(x),
                                                                       training=True))
    np.testing.assert_array_equal(got, want, err_msg=f"{tag} Dropout of a sharded input")
    print(f"ok {tag} Dropout of a sharded input", flush=True)


def main() -> None:
    ti.install_keras()
    expected = {(name, kind): [keras.ops.convert_to_numpy(v) for v in draw(op, kind)]
                for name, op in OPS.items() for kind in SEEDS}
    for mesh in MESHES:
        check_mesh(expected, *mesh)


if __name__ == "__main__":
    main()
