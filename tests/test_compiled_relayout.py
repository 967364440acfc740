"""A relayout inside ``torch.compile``: ``distribute_tensor`` of a DTensor
whose dims are split over two mesh axes (as Keras's output layouts do inside
a ``jit_compile=True`` step) compiles, with eager's values and spec.

Eagerly parity lets DTensor merge the gathers of such an array through a
flattened mesh (``redistribute.merged``); creating that mesh while
dynamo traces fails under fake tensors ("RuntimeError when making fake
tensor call"), which broke the compiled Keras MLP with output layouts.
"""

from __future__ import annotations

import numpy as np
import pytest
import sequential_collectives
import torch

import parity

HOST = np.arange(128, dtype=np.float32).reshape(8, 16)


@pytest.fixture(scope="module")
def sim8():
    from parity import torch_impl

    with torch_impl.simulate(8):
        yield torch_impl


@pytest.mark.parametrize("source, target", [
    ((("data", "model"), None), (None, None)),
    ((("data", "model"), None), ("data", None)),
    (("data", "model"), (None, "model")),
])
def test_a_relayout_of_an_array_split_over_two_axes_compiles(sim8, source, target):
    mesh = parity.DeviceMesh((2, 4), ("data", "model"))
    x = sim8.distribute_tensor(HOST, parity.TensorLayout(source, mesh))
    layout = parity.TensorLayout(target, mesh)

    def relayout(t):
        return sim8.distribute_tensor(t, layout)

    torch._dynamo.reset()
    # no flattened mesh can be made while dynamo traces: the compiled graph
    # gathers one mesh axis at a time, and DTensor says so (a known limit,
    # kept out of the suite's guard in tests/conftest.py)
    with sequential_collectives.collected():
        got = torch.compile(relayout, backend="aot_eager", fullgraph=True, dynamic=False)(x)
    want = relayout(x)
    np.testing.assert_array_equal(sim8.to_numpy(got), HOST)
    assert sim8.describe(got).spec == sim8.describe(want).spec
