"""A reshape DTensor turns into a view its local block cannot give
(``semantics/local_views.py``): under ``jax_semantics()`` it is JAX's
value reshape; outside, DTensor's error stands. Found in keras-hub's
Qwen3.5 gated delta rule (issue 27)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import parity

L = parity.TensorLayout
VALUE = np.random.default_rng(0).standard_normal((8, 8, 8, 4)).astype(np.float32)


def heads_transposed_and_merged(z, one):
    # An elementwise op with an expanded operand lays the global result out
    # like the transposed operand and the local block contiguously; the
    # transpose back then looks contiguous globally and is not locally, and
    # merging batch with heads is a view DTensor asks of the block.
    scaled = one.expand(8, 8, 8, 4) * z.transpose(1, 2)
    return scaled.transpose(1, 2).reshape(64, 8, 4)


def operands(ti):
    mesh = parity.DeviceMesh((2, 4), ("data", "model"))
    return (ti.distribute_tensor(VALUE, L(("data", "model", None, None), mesh)),
            ti.distribute_tensor(np.ones((1, 1, 1, 1), np.float32), L((None,) * 4, mesh)))


def test_a_view_the_local_block_cannot_give_is_a_reshape_under_jax_semantics(sim8):
    ti = sim8
    z, one = operands(ti)
    with ti.jax_semantics():
        out = heads_transposed_and_merged(z, one)
    expected = heads_transposed_and_merged(torch.tensor(VALUE), torch.ones(1, 1, 1, 1)).numpy()
    np.testing.assert_array_equal(ti.to_numpy(out), expected)
    # JAX's reshape: the merged dim is split over both axes, data-major.
    assert ti.describe(out).spec == (("data", "model"), (), ())


def test_outside_jax_semantics_dtensor_refuses_it(sim8):
    ti = sim8
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        heads_transposed_and_merged(*operands(ti))
