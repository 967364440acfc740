"""``torch.fft`` on a sharded transformed dim under ``jax_semantics()``
(issue 25): the unsharded value with JAX's spec (``jax.jit`` of
``jnp.fft`` on arrays sharded alike), where DTensor alone ran the transform
on each block and MKL refused it ("Inconsistent configuration
parameters") -- with ``n=`` and without. A length the dim's shard count
does not divide (JAX refuses it) comes back replicated on that dim.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import parity
from parity import torch_impl as ti
from tests.test_layout_keeping_rules import NAMES, _jax_spec

L = parity.TensorLayout
SPEC = (None, "data", None)
CASES = [  # (id, torch call, jax call)
    ("fft_n10", lambda a: torch.fft.fft(a, n=10, dim=1), lambda a: jnp.fft.fft(a, n=10, axis=1)),
    ("fft_no_n", lambda a: torch.fft.fft(a, dim=1), lambda a: jnp.fft.fft(a, axis=1)),
    ("ifft_n10", lambda a: torch.fft.ifft(a, n=10, dim=1), lambda a: jnp.fft.ifft(a, n=10, axis=1)),
    ("rfft_n10", lambda a: torch.fft.rfft(a, n=10, dim=1), lambda a: jnp.fft.rfft(a, n=10, axis=1)),
    ("irfft_n10", lambda a: torch.fft.irfft(a, n=10, dim=1),
     lambda a: jnp.fft.irfft(a, n=10, axis=1)),
    ("hfft_n10", lambda a: torch.fft.hfft(a, n=10, dim=1), lambda a: jnp.fft.hfft(a, n=10, axis=1)),
    ("fft2_s", lambda a: torch.fft.fft2(a, s=(10, 3), dim=(1, 2)),
     lambda a: jnp.fft.fft2(a, s=(10, 3), axes=(1, 2))),
    ("fftn_all", torch.fft.fftn, jnp.fft.fftn),
]


def _value(shape=(4, 6, 8)):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_fft_on_a_sharded_dim_has_the_unsharded_value_and_jaxs_spec(sim8, case):
    from parity import jax_ref

    _, tfn, jfn = case
    value = _value()
    mesh = parity.DeviceMesh((2, 4), NAMES)
    with ti.jax_semantics():
        out = tfn(ti.distribute_tensor(value, L(SPEC, mesh)))
    expected = tfn(torch.from_numpy(value)).resolve_conj().numpy()
    np.testing.assert_allclose(ti.to_numpy(out), expected, rtol=1e-4, atol=1e-4)
    jmesh = parity.DeviceMesh((2, 4), NAMES, jax_ref.list_devices())
    assert ti.describe(out).spec == _jax_spec(jfn, [value], [SPEC], jmesh)


def test_issue_case_on_the_three_axis_mesh_with_grad(sim8):
    # the issue's float32[5, 6, 7], its dim 1 sharded; n=10 divides by the
    # axis (2): kept sharded; the gradient has the input's placement
    value = _value((5, 6, 7))
    mesh = parity.DeviceMesh((2, 2, 2), ("a", "b", "c"))
    x = ti.distribute_tensor(value, L((None, "a", None), mesh)).requires_grad_()
    ref = torch.from_numpy(value).requires_grad_()
    with ti.jax_semantics():
        out = torch.fft.fft(x, n=10, dim=1)
        out.abs().sum().backward()
    torch.fft.fft(ref, n=10, dim=1).abs().sum().backward()
    np.testing.assert_allclose(ti.to_numpy(out), torch.fft.fft(ref.detach(), n=10, dim=1).numpy(),
                               rtol=1e-4, atol=1e-4)
    assert ti.describe(out).spec == ((), ("a",), ())
    np.testing.assert_allclose(ti.to_numpy(x.grad), ref.grad.numpy(), rtol=1e-4, atol=1e-4)
    assert tuple(x.grad.placements) == tuple(x.placements)


def test_length_the_shards_do_not_divide_is_replicated(sim8):
    value = _value()
    mesh = parity.DeviceMesh((2, 4), NAMES)
    with ti.jax_semantics():
        out = torch.fft.fft(ti.distribute_tensor(value, L(SPEC, mesh)), n=7, dim=1)
    np.testing.assert_allclose(ti.to_numpy(out),
                               torch.fft.fft(torch.from_numpy(value), n=7, dim=1).numpy(),
                               rtol=1e-4, atol=1e-4)
    assert ti.describe(out).spec == ((), (), ())
