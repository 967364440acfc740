"""``all_gather_variable`` of a tensor that requires grad: one collective
(issue 13, item 3: DTensor's redistribute takes one all_gather per mesh
axis for a dim split out of mesh order or for two sharded dims), the
gathered values, and the gradient back with the input's placements."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.distributed.tensor.debug import CommDebugMode

import parity

SPECS = [(("data", "model"), ()), (("model", "data"), ()), (("data",), ("model",)),
         (("model",), ("data",))]


@pytest.fixture
def mesh(sim8):
    return parity.DeviceMesh((2, 4), ("data", "model"))


def variable(sim8, mesh, spec):
    host = np.arange(64, dtype=np.float32).reshape(8, 8)
    return host, sim8.distribute_variable(host, parity.TensorLayout.from_spec(spec, mesh))


@pytest.mark.parametrize("spec", SPECS)
def test_gathering_a_variable_that_requires_grad_is_one_collective(sim8, mesh, spec):
    host, x = variable(sim8, mesh, spec)
    with CommDebugMode() as comm:
        out = sim8.all_gather_variable(x)
    assert comm.get_total_counts() == 1, comm.get_comm_counts()
    assert out.requires_grad and sim8.describe(out).spec == ((), ())
    np.testing.assert_array_equal(sim8.to_numpy(out), host)


@pytest.mark.parametrize("spec", SPECS)
def test_the_gathered_variables_gradient_has_the_inputs_placements(sim8, mesh, spec):
    _, x = variable(sim8, mesh, spec)
    weight = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    with sim8.jax_semantics():
        (sim8.all_gather_variable(x) * torch.as_tensor(weight)).sum().backward()
    assert tuple(x.grad.placements) == tuple(x.placements)
    np.testing.assert_allclose(sim8.to_numpy(x.grad), weight)
