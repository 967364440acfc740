"""Ops whose result keeps the operand's sharding in JAX (flip, rot90,
tril/triu, diag, narrow, repeat_interleave, glu, quantile, hstack/vstack,
inner, multi_dot, eigvalsh, max/avg pooling, the activations DTensor has no
backward for): under ``jax_semantics()`` each gives the unsharded op's value
with the placement JAX's explicit-mode rule gives (``jax.jit`` on arrays
sharded alike), not the replicated result of a gather.

Without the rules (``semantics/rules/rearrange.py``, ``linalg.py``, the
additions to ``shapes``, ``contractions``, ``reductions``, ``spatial`` and
the elementwise names) every case here comes back with another spec.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import parity
from parity import jax_ref

jax_ref.simulate(8)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from parity import torch_impl as ti  # noqa: E402

L = parity.TensorLayout
NAMES = ("data", "model")  # (2, 4)


def _host(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _spd(a):
    return a @ np.swapaxes(a, -1, -2) + 4 * np.eye(a.shape[-1], dtype=np.float32)


def _pool_j(fn, init):
    return lambda a: lax.reduce_window(a, init, fn, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


# (id, torch fn, jax fn, operands as (shape, spec), makes positive-definite, needs grad)
CASES = [
    ("flip_sharded_dim", lambda a: torch.flip(a, [0]), lambda a: jnp.flip(a, 0),
     [((8, 16), ("data", "model"))]),
    ("flip_method_two_dims", lambda a: a.flip(0, 1), lambda a: jnp.flip(a, (0, 1)),
     [((8, 16), ("data", "model"))]),
    ("fliplr", torch.fliplr, jnp.fliplr, [((8, 16), (None, "model"))]),
    ("flipud", torch.flipud, jnp.flipud, [((8, 16), ("data", "model"))]),
    ("rot90", torch.rot90, jnp.rot90, [((8, 16), ("data", "model"))]),
    ("rot90_k3", lambda a: torch.rot90(a, 3), lambda a: jnp.rot90(a, 3),
     [((8, 16), (None, "data"))]),
    ("tril", torch.tril, jnp.tril, [((16, 16), ("data", "model"))]),
    ("triu_offset", lambda a: torch.triu(a, 3), lambda a: jnp.triu(a, 3),
     [((4, 16, 16), ("data", None, "model"))]),
    ("diag_of_vector", torch.diag, jnp.diag, [((16,), ("data",))]),
    ("narrow", lambda a: torch.narrow(a, 0, 2, 4), lambda a: lax.slice_in_dim(a, 2, 6, axis=0),
     [((8, 16), ("data", None))]),
    ("repeat_interleave", lambda a: torch.repeat_interleave(a, 2, dim=0),
     lambda a: jnp.repeat(a, 2, axis=0), [((8, 16), (None, ("data", "model")))], "grad"),
    ("glu", lambda a: F.glu(a, dim=-1), lambda a: jax.nn.glu(a, axis=-1),
     [((8, 16), ("data", "model"))]),
    ("quantile", lambda a: torch.quantile(a, 0.5, dim=1), lambda a: jnp.quantile(a, 0.5, axis=1),
     [((8, 16), ("data", None))]),
    ("quantile_vector_q", lambda a: torch.quantile(a, torch.tensor([0.25, 0.5]), dim=1),
     lambda a: jnp.quantile(a, jnp.array([0.25, 0.5]), axis=1), [((8, 16), ("data", None))]),
    ("hstack", lambda a, b: torch.hstack([a, b]), lambda a, b: jnp.hstack([a, b]),
     [((8, 16), (None, "model")), ((8, 16), (None, "model"))]),
    ("vstack", lambda a, b: torch.vstack([a, b]), lambda a, b: jnp.vstack([a, b]),
     [((8, 16), ("data", "model")), ((8, 16), ("data", "model"))]),
    ("vstack_of_vectors", lambda a, b: torch.vstack([a, b]), lambda a, b: jnp.vstack([a, b]),
     [((8,), ("data",)), ((8,), ("data",))]),
    ("dstack", lambda a, b: torch.dstack([a, b]), lambda a, b: jnp.dstack([a, b]),
     [((8, 16), ("data", "model")), ((8, 16), ("data", "model"))]),
    ("inner", torch.inner, jnp.inner,
     [((8, 16), (None, ("model", "data"))), ((8, 16), (("model", "data"), None))]),
    ("multi_dot", lambda a, b, c: torch.linalg.multi_dot([a, b, c]),
     lambda a, b, c: jnp.linalg.multi_dot([a, b, c]),
     [((8, 16), (None, "model")), ((16, 8), (None, None)), ((8, 16), (None, "model"))]),
    ("eigvalsh", torch.linalg.eigvalsh, jnp.linalg.eigvalsh, [((8, 4, 4), ("data", None, None))],
     "spd"),
    ("max_pool2d_spatial", lambda a: F.max_pool2d(a, 2), _pool_j(lax.max, -jnp.inf),
     [((8, 4, 8, 8), (None, None, None, "model"))]),
    ("avg_pool2d_spatial", lambda a: F.avg_pool2d(a, 2),
     lambda a: _pool_j(lax.add, 0.0)(a) / 4, [((8, 4, 8, 8), ("data", None, "model", None))]),
    ("hardswish_with_grad", F.hardswish, jax.nn.hard_swish, [((8, 16), ("data", "model"))],
     "grad"),
    ("logsigmoid_with_grad", F.logsigmoid, jax.nn.log_sigmoid,
     [((8, 16), (None, ("model", "data")))], "grad"),
]


def _jax_spec(fn, arrays, specs, mesh):
    jmesh = jax_ref.to_jax_mesh(mesh)
    xs = [jax_ref.distribute_tensor(a, L(s, mesh)) for a, s in zip(arrays, specs)]
    with jax.set_mesh(jmesh):
        out = jax.jit(fn)(*xs)
    return jax_ref.describe(out).spec


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_result_has_jax_placement_and_the_unsharded_value(sim8, case):
    _, tfn, jfn, operands, *flags = case
    jmesh = parity.DeviceMesh((2, 4), NAMES, jax_ref.list_devices())
    mesh = parity.DeviceMesh((2, 4), NAMES)
    arrays = [_host(shape, seed) for seed, (shape, _) in enumerate(operands)]
    if "spd" in flags:
        arrays = [_spd(a) for a in arrays]
    specs = [spec for _, spec in operands]
    expected = _jax_spec(jfn, arrays, specs, jmesh)
    xs = [ti.distribute_tensor(a, L(s, mesh)) for a, s in zip(arrays, specs)]
    if "grad" in flags:
        xs = [x.requires_grad_() for x in xs]
    with ti.jax_semantics():
        out = tfn(*xs)
    reference = tfn(*[torch.from_numpy(a) for a in arrays])
    assert ti.describe(out).spec == expected
    np.testing.assert_allclose(ti.to_numpy(out), reference.numpy(), rtol=1e-5, atol=1e-5)


def test_gradient_through_flip_keeps_the_input_placement(sim8):
    mesh = parity.DeviceMesh((2, 4), NAMES)
    xh = _host((8, 16), 0)
    x = ti.distribute_tensor(xh, L(("data", "model"), mesh)).requires_grad_()
    weights = torch.arange(128, dtype=torch.float32).reshape(8, 16)
    with ti.jax_semantics():
        (torch.flip(x, [0]) * weights).sum().backward()
    assert ti.describe(x.grad).spec == (("data",), ("model",))
    np.testing.assert_allclose(ti.to_numpy(x.grad), torch.flip(weights, [0]).numpy())


def test_diag_of_a_matrix_is_not_covered_and_stays_right(sim8):
    # JAX refuses diag of a sharded matrix (an ambiguous gather): no rule,
    # DTensor's result as it is, the unsharded value.
    mesh = parity.DeviceMesh((2, 4), NAMES)
    xh = _host((16, 16), 0)
    x = ti.distribute_tensor(xh, L(("data", "model"), mesh))
    with ti.jax_semantics():
        out = torch.diag(x)
    np.testing.assert_allclose(ti.to_numpy(out), np.diag(xh))
