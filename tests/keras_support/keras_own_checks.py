"""What Keras's own torch distribution does, without parity (the "Keras's
own torch" column of the README's table). Run by ``tests/test_keras_own_torch.py``
with ``KERAS_BACKEND=torch`` on a Keras that ships
``keras.src.backend.torch.distribution_lib`` (keras-nightly 3.16 dev), in one
process with a one-rank gloo group: Keras's own backend has no simulated
devices, so one process is all it can show without torchrun.

Each check prints ``CHECK <name> ok`` or ``CHECK <name> FAIL <json traceback>``.
"""

from __future__ import annotations

import inspect
import os
import socket
import sys
import warnings

import numpy as np

import keras
from keras import distribution as kd
from check_runner import run_check

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def mesh11():
    return kd.DeviceMesh((1, 1), ["batch", "model"], devices=["cpu:0"])


@check
def check_one_process_sees_one_device():
    """No simulated devices: one process sees ``cpu:0`` only."""
    assert kd.list_devices() == ["cpu:0"], kd.list_devices()


@check
def check_one_mesh_axis_on_two_dims_keeps_the_last():
    """A layout naming ``model`` for two dims is accepted and silently keeps
    the last dim (JAX and parity raise)."""
    from keras.src.backend.torch import distribution_lib as own
    from torch.distributed.tensor import Replicate, Shard

    layout = own._to_backend_layout(kd.TensorLayout(("model", "model"), mesh11()))
    assert tuple(layout.placements) == (Replicate(), Shard(1)), layout.placements


@check
def check_replicated_variable_is_a_plain_parameter():
    """A variable whose layout is fully replicated stays a plain Parameter
    (parity makes it a replicated DTensor on the mesh)."""
    import torch
    from torch.distributed.tensor import DTensor

    with kd.DataParallel(device_mesh=kd.DeviceMesh((1,), ["batch"], devices=["cpu:0"])).scope():
        v = keras.Variable(np.ones((4, 2), "float32"))
    assert isinstance(v.value, torch.nn.Parameter) and not isinstance(v.value.data, DTensor), type(v.value)


@check
def check_distribute_data_input_takes_two_arguments():
    """Keras's own ``distribute_data_input(per_process_batch, layout)``;
    JAX's and parity's take ``batch_dim_name`` too."""
    from keras.src.backend.torch import distribution_lib as own

    params = list(inspect.signature(own.distribute_data_input).parameters)
    assert params == ["per_process_batch", "layout"], params


@check
def check_jit_compile_under_model_parallel_warns_and_runs_eagerly():
    """``jit_compile=True`` under ModelParallel warns once and runs eagerly."""
    layout_map = kd.LayoutMap(mesh11())
    layout_map["d1/kernel"] = (None, "model")
    kd.set_distribution(kd.ModelParallel(layout_map=layout_map, batch_dim_name="batch"))
    try:
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, name="d1"),
                                  keras.layers.Dense(4, name="d2")])
        model.compile(optimizer="sgd", loss="mse", jit_compile=True)
        x = np.ones((8, 8), "float32")
        y = np.zeros((8, 4), "float32")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.fit(x, y, batch_size=8, epochs=1, verbose=0)
        messages = [str(w.message) for w in caught]
        assert any("`jit_compile=True` is not supported" in m for m in messages), messages
        assert not model._use_torch_compile()
    finally:
        kd.set_distribution(None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    # Keras's own list_devices counts processes once WORLD_SIZE is set, so the
    # first check runs before the one-rank group exists.
    run_check(check_one_process_sees_one_device)
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        for fn in CHECKS[1:]:
            run_check(fn)
    finally:
        dist.destroy_process_group()



if __name__ == "__main__":
    from keras_under_test import assert_keras_under_test

    assert_keras_under_test()
    sys.exit(main())
