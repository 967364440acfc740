"""``v @ m`` with a 1-D ``v`` under ``jax_semantics()``: the result has
numpy's shape, JAX's spec (``jax.jit`` on arrays sharded alike) and the
unsharded value. DTensor's own matmul (torch 2.13) keeps the vector's
inserted dim in the global shape (``[1, n]`` over ``[n]`` blocks); PyTorch's
OpInfo samples found it (``parity run --source opinfo --full --op matmul``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import parity
from parity import torch_impl as ti
from tests.test_layout_keeping_rules import NAMES, _host, _jax_spec

L = parity.TensorLayout
# JAX's explicit mode has a rule where the contracted dim is not sharded.
JAX_CASES = [  # (id, vector spec, matrix shape, matrix spec)
    ("matrix_columns_sharded", (None,), (8, 4), (None, "model")),
    ("batch_of_matrices", (None,), (2, 8, 4), ("data", None, "model")),
]
# JAX refuses these as ambiguous ("Contracting dimensions are sharded");
# parity completes the sum: numpy's shape and value, every rank alike.
SUMMED_CASES = [
    ("vector_sharded_as_rows", ("data",), (8, 4), ("data", None)),
    ("vector_over_both_axes", (("data", "model"),), (8, 4), (("data", "model"), None)),
    ("batch_summed_over_model", ("model",), (2, 8, 4), ("data", "model", None)),
]
CALLS = {"matmul": torch.matmul, "operator": lambda a, b: a @ b,
         "rmatmul": lambda a, b: b.__rmatmul__(a)}


def _product(vspec, mshape, mspec, call):
    v, m = _host((8,), 0), _host(mshape, 1)
    mesh = parity.DeviceMesh((2, 4), NAMES)
    tv, tm = ti.distribute_tensor(v, L(vspec, mesh)), ti.distribute_tensor(m, L(mspec, mesh))
    with ti.jax_semantics():
        out = CALLS[call](tv, tm)
    assert tuple(out.shape) == (v @ m).shape
    np.testing.assert_allclose(ti.to_numpy(out), v @ m, rtol=1e-5, atol=1e-5)
    return v, m, out


@pytest.mark.parametrize("case", JAX_CASES, ids=[c[0] for c in JAX_CASES])
@pytest.mark.parametrize("call", sorted(CALLS))
def test_vector_times_matrix_has_numpys_shape_and_jaxs_spec(sim8, case, call):
    from parity import jax_ref

    _, vspec, mshape, mspec = case
    v, m, out = _product(vspec, mshape, mspec, call)
    jmesh = parity.DeviceMesh((2, 4), NAMES, jax_ref.list_devices())
    assert ti.describe(out).spec == _jax_spec(lambda a, b: a @ b, [v, m], [vspec, mspec], jmesh)


@pytest.mark.parametrize("case", SUMMED_CASES, ids=[c[0] for c in SUMMED_CASES])
@pytest.mark.parametrize("call", sorted(CALLS))
def test_vector_times_matrix_summed_over_a_sharded_dim_has_numpys_shape(sim8, case, call):
    _, vspec, mshape, mspec = case
    _, m, out = _product(vspec, mshape, mspec, call)
    assert len(ti.describe(out).spec) == m.ndim - 1


def test_vector_times_plain_matrix_is_the_unsharded_product(sim8):
    mesh = parity.DeviceMesh((2, 4), NAMES)
    v, m = _host((8,), 0), _host((8, 4), 1)
    tv = ti.distribute_tensor(v, L(("data",), mesh))
    with ti.jax_semantics():
        out = torch.matmul(tv, torch.from_numpy(m))
    assert tuple(out.shape) == (4,)
    np.testing.assert_allclose(ti.to_numpy(out), v @ m, rtol=1e-5, atol=1e-5)
