"""The fast path's clean calls are keyed by what decides the mode's work; a
random op's result also depends on the scope's ``random`` option, which the
key lacks: a dropout proven clean under ``random="per_rank"`` must not run
directly under a later ``random="invariant"`` scope (which gives the
unsharded program's values)."""

from __future__ import annotations

import numpy as np
import torch

import parity
from parity import torch_impl as ti
from parity.torch_impl.semantics import fast_path


def _dropout(x, random: str) -> np.ndarray:
    torch.manual_seed(0)
    with ti.jax_semantics(random=random):
        y = torch.nn.functional.dropout(x, 0.5, training=True)
    return ti.to_numpy(y)


def test_a_per_rank_draw_is_not_remembered_for_an_invariant_scope(sim8):
    fast_path.forget_all()
    try:
        mesh = parity.DeviceMesh((2, 4), ("data", "model"))
        x = ti.distribute_tensor(np.ones((8, 8), np.float32), parity.TensorLayout(("data", None), mesh))
        invariant = _dropout(x, "invariant")
        assert not fast_path.CLEAN  # an invariant draw takes random_ops.run, never remembered
        _dropout(x, "per_rank")
        _dropout(x, "per_rank")
        np.testing.assert_array_equal(_dropout(x, "invariant"), invariant)
    finally:
        fast_path.forget_all()
