"""tensordot and batch norm under ``jax_semantics()``: the unsharded op's
values, gradients and running statistics, without DTensor's strategy search
for them (which took over a minute per call on a (2, 2, 2) mesh: the
OpInfo column's only timeouts).

* ``tensordot`` runs as an einsum on each rank's blocks, laid out by the
  contraction rule (``semantics/local_ops.py``);
* batch norm computes with only the channel dim sharded, as the running
  statistics are (``rules/layers.py``), and ``aten._batch_norm_with_update``
  runs as ``aten.native_batch_norm`` (DTensor has a strategy for its
  backward).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import parity
from parity import torch_impl as ti

L = parity.TensorLayout
MESHES = {"2x4": ((2, 4), ("data", "model")), "2x2x2": ((2, 2, 2), ("a", "b", "c"))}


def _host(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _mesh(name):
    shape, names = MESHES[name]
    return parity.DeviceMesh(shape, names)


def _ranks_hold_the_same(x, expected):
    """Every rank's block of a replicated DTensor equals ``expected``."""
    for rank in range(8):
        np.testing.assert_allclose(ti.local_block(x, rank).numpy(), expected, rtol=1e-5,
                                   atol=1e-6)


# (mesh, a shape, a spec, b shape, b spec or None for a plain tensor, dims)
TENSORDOT = [
    ("2x2x2", (2, 2, 2), (None, None, "c"), (2, 2, 2), None, 2),
    ("2x2x2", (2, 2, 2), (None, "c", None), (2, 2, 2), None, ([0, 1], [2, 0])),
    ("2x4", (8, 16), (None, "model"), (16, 8), ("model", None), 1),
    ("2x4", (8, 4, 16), ("data", None, "model"), (4, 16, 8), (None, None, "model"), 2),
]


@pytest.mark.parametrize("case", TENSORDOT, ids=[f"{c[0]}-{c[2]}-{c[4]}-{c[5]}" for c in TENSORDOT])
def test_tensordot_gives_the_unsharded_values_and_gradients(sim8, case):
    mesh_name, a_shape, a_spec, b_shape, b_spec, dims = case
    mesh = _mesh(mesh_name)
    ah, bh = _host(a_shape, 0), _host(b_shape, 1)
    a = ti.distribute_tensor(ah, L(a_spec, mesh)).requires_grad_()
    b = (torch.tensor(bh) if b_spec is None
         else ti.distribute_tensor(bh, L(b_spec, mesh))).requires_grad_()
    ra, rb = torch.tensor(ah, requires_grad=True), torch.tensor(bh, requires_grad=True)
    ref = torch.tensordot(ra, rb, dims=dims)
    weights = torch.arange(ref.numel(), dtype=torch.float32).reshape(ref.shape)
    (ref * weights).sum().backward()
    with ti.jax_semantics():
        out = torch.tensordot(a, b, dims=dims)
        (out * weights).sum().backward()
    assert ti.describe(out).pending == ()
    np.testing.assert_allclose(ti.to_numpy(out), ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ti.to_numpy(a.grad), ra.grad.numpy(), rtol=1e-5, atol=1e-4)
    assert tuple(a.grad.placements) == tuple(a.placements)
    got_b = b.grad if b_spec is None else ti.to_numpy(b.grad)
    np.testing.assert_allclose(np.asarray(got_b), rb.grad.numpy(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("b_spec", [(None, None, "c"), None], ids=["sharded", "plain"])
def test_tensordot_on_a_3d_mesh_takes_seconds(sim8, b_spec):
    # DTensor's own strategy search for tensordot (and for einsum with the
    # plain operand): 40-70 s on an idle machine.
    mesh = _mesh("2x2x2")
    a = ti.distribute_tensor(_host((2, 2, 2), 0), L((None, None, "c"), mesh))
    b = (torch.tensor(_host((2, 2, 2), 1)) if b_spec is None
         else ti.distribute_tensor(_host((2, 2, 2), 1), L(b_spec, mesh)))
    start = time.perf_counter()
    with ti.jax_semantics():
        out = torch.tensordot(a, b, dims=2)
    assert time.perf_counter() - start < 20
    np.testing.assert_allclose(ti.to_numpy(out), np.tensordot(_host((2, 2, 2), 0),
                                                              _host((2, 2, 2), 1), 2), rtol=1e-5)


def _batch_norm_operands(mesh, x_spec, stat_spec):
    xh = _host((4, 4, 4), 0)
    w, b = _host((4,), 1), _host((4,), 2)
    x = ti.distribute_tensor(xh, L(x_spec, mesh)).requires_grad_()
    weight = ti.distribute_tensor(w, L(stat_spec, mesh)).requires_grad_()
    bias = ti.distribute_tensor(b, L(stat_spec, mesh)).requires_grad_()
    mean = ti.distribute_tensor(np.zeros(4, np.float32), L(stat_spec, mesh))
    var = ti.distribute_tensor(np.ones(4, np.float32), L(stat_spec, mesh))
    plain = [torch.tensor(v, requires_grad=True) for v in (xh, w, b)]
    return (x, weight, bias, mean, var), plain + [torch.zeros(4), torch.ones(4)]


@pytest.mark.parametrize("mesh_name,x_spec,stat_spec", [
    ("2x4", ("data", None, None), ("data",)),
    ("2x2x2", (None, "a", None), ("a",)),
], ids=["2x4-batch-sharded", "2x2x2-channel-sharded"])
def test_aten_batch_norm_with_update_gradient_takes_seconds_and_is_right(sim8, mesh_name, x_spec,
                                                                         stat_spec):
    """OpInfo calls ``torch.ops.aten._batch_norm_with_update`` itself; its
    gradient went through DTensor's propagation of ``batch_norm_backward``'s
    decomposition (1-3 minutes)."""
    mesh = _mesh(mesh_name)
    (x, w, b, mean, var), (rx, rw, rb, rmean, rvar) = _batch_norm_operands(mesh, x_spec, stat_spec)
    op = torch.ops.aten._batch_norm_with_update
    ref = op(rx, rw, rb, rmean, rvar, 0.5, 1e-5)
    ref[0].sum().backward()
    start = time.perf_counter()
    with ti.jax_semantics():
        out = op(x, w, b, mean, var, 0.5, 1e-5)
        out[0].sum().backward()
    assert time.perf_counter() - start < 20
    assert len(out) == 4 and out[3].numel() == 0 and out[3].dtype == torch.uint8
    for got, want in zip(out[:3], ref[:3]):
        np.testing.assert_allclose(ti.to_numpy(got), want.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ti.to_numpy(x.grad), rx.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ti.to_numpy(w.grad), rw.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ti.to_numpy(mean), rmean.numpy(), rtol=1e-5, atol=1e-6)
    assert ti.describe(x.grad).spec == ti.describe(x).spec


def test_batch_norm_over_a_sharded_batch_updates_every_ranks_replicated_statistics(sim8):
    """DTensor alone computed with the channel dim sharded and each rank
    updated its replicated running statistics from its own channels only:
    the ranks' copies differed."""
    mesh = _mesh("2x4")
    (x, w, b, mean, var), (rx, rw, rb, rmean, rvar) = _batch_norm_operands(
        mesh, ("data", None, None), (None,))
    ref = F.batch_norm(rx, rmean, rvar, rw, rb, training=True, momentum=0.5)
    with ti.jax_semantics():
        out = F.batch_norm(x, mean, var, w, b, training=True, momentum=0.5)
    np.testing.assert_allclose(ti.to_numpy(out), ref.detach().numpy(), rtol=1e-4, atol=1e-5)
    _ranks_hold_the_same(mean, rmean.numpy())
    _ranks_hold_the_same(var, rvar.numpy())
    assert ti.describe(out).spec == ti.describe(x).spec


def test_batch_norm_keeps_sharded_running_statistics_in_place(sim8):
    mesh = _mesh("2x4")
    (x, w, b, mean, var), (rx, rw, rb, rmean, rvar) = _batch_norm_operands(
        mesh, ("data", None, "model"), ("model",))
    before = tuple(mean.placements)
    ref = F.batch_norm(rx, rmean, rvar, rw, rb, training=True, momentum=0.5)
    with ti.jax_semantics():
        out = F.batch_norm(x, mean, var, w, b, training=True, momentum=0.5)
    assert tuple(mean.placements) == before
    np.testing.assert_allclose(ti.to_numpy(mean), rmean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ti.to_numpy(var), rvar.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ti.to_numpy(out), ref.detach().numpy(), rtol=1e-4, atol=1e-5)
