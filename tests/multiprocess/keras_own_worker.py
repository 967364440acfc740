"""Keras's own torch distribution on several gloo ranks, parity not installed
(the rows of the README's Keras table that one process cannot show). Run by
``tests/test_keras_own_torch.py`` under torchrun, 4 ranks, mesh (2, 2)
``("batch", "model")``, on a Keras with its own torch ``distribution_lib``:

    python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/multiprocess/keras_own_worker.py

Each rank prints ``CHECK <name> ok`` or ``CHECK <name> FAIL <json traceback>``
for every check; each check states what Keras's own backend does.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["KERAS_BACKEND"] = "torch"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "keras_support"))

import numpy as np  # noqa: E402
from check_runner import run_check  # noqa: E402

GLOBAL_BATCH = 8
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def spec_of(tensor) -> list[list[str]]:
    """Mesh axes per dim, read from DTensor placements (a plain tensor: none)."""
    from torch.distributed.tensor import DTensor, Shard

    out: list[list[str]] = [[] for _ in tensor.shape]
    if isinstance(tensor, DTensor):
        for axis, placement in zip(tensor.device_mesh.mesh_dim_names, tensor.placements):
            if isinstance(placement, Shard):
                out[placement.dim].append(axis)
    return out


def model_parallel(layout: dict):
    from keras import distribution as kd

    mesh = kd.DeviceMesh((2, 2), ["batch", "model"], kd.list_devices())
    layout_map = kd.LayoutMap(mesh)
    for key, axes in layout.items():
        layout_map[key] = axes
    return kd.ModelParallel(layout_map=layout_map, batch_dim_name="batch", auto_shard_dataset=False)


def this_process_rows(data: np.ndarray) -> np.ndarray:
    """This process's rows of the global batch: ranks 0-1 hold the first
    half (batch shard 0), ranks 2-3 the second."""
    import torch.distributed as dist

    per = GLOBAL_BATCH // 2
    start = (dist.get_rank() // 2) * per
    return data[start:start + per]


def distributed_input(distribution, data: np.ndarray):
    from keras.src.backend import distribution_lib as backend_dist

    return backend_dist.distribute_data_input(
        this_process_rows(data), distribution.get_data_layout(data.shape))


@check
def check_embedding_on_both_axes_fails_with_index_error():
    """keras-hub's embedding: a table laid out ``("model", "batch")`` looked
    up with ids laid out ``("batch", None)`` returns a pending (masked
    partial) result whose reduction fails with the ``IndexError`` keras-hub
    users saw when reading the values (JAX gives its auto-mode values and
    spec; parity gives JAX's)."""
    import keras

    rng = np.random.default_rng(0)
    table = rng.normal(size=(32, 16)).astype("float32")
    ids = rng.integers(0, 32, size=(GLOBAL_BATCH, 8)).astype("int32")
    distribution = model_parallel({".*embedding/embeddings": ("model", "batch")})
    with distribution.scope():
        model = keras.Sequential([keras.Input((8,), dtype="int32"),
                                  keras.layers.Embedding(32, 16, name="embedding")])
        model.set_weights([table])
        assert spec_of(model.weights[0].value.data) == [["model"], ["batch"]]
        try:
            model(distributed_input(distribution, ids)).full_tensor()
        except IndexError as err:
            assert "The shape of the mask" in str(err), err
        else:
            raise AssertionError("the lookup ran: Keras's own embedding gather changed")


@check
def check_output_layout_from_layout_map_is_applied():
    """A LayoutMap ``.../output`` entry relayouts the layer's output: a
    column-parallel Dense (natural output ``("batch", "model")``) comes back
    ``("batch", None)`` as the map says, and holds the right values."""
    import keras

    rng = np.random.default_rng(1)
    x = rng.normal(size=(GLOBAL_BATCH, 8)).astype("float32")
    kernel = rng.normal(size=(8, 16)).astype("float32")
    distribution = model_parallel({".*d1/kernel": (None, "model"), ".*d1/output": ("batch", None)})
    with distribution.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, use_bias=False, name="d1")])
        model.set_weights([kernel])
        out = model(distributed_input(distribution, x))
    assert spec_of(model.weights[0].value.data) == [[], ["model"]]
    assert spec_of(out) == [["batch"], []], spec_of(out)
    np.testing.assert_allclose(out.full_tensor().detach().numpy(), x @ kernel, rtol=1e-5, atol=1e-5)


def main() -> None:
    import keras

    keras.distribution.initialize()
    for fn in CHECKS:
        run_check(fn)


if __name__ == "__main__":
    from keras_under_test import assert_keras_under_test

    assert_keras_under_test()
    main()
