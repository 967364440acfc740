"""One mesh, as in JAX: a DTensor on a slice of another DTensor's mesh
(FSDP2's ``dp`` submesh ``mesh["dp"]``, a flattened axis, a 1-D mesh of the
slice's ranks) meets the parent mesh's DTensors under ``jax_semantics()``
as the parent's array replicated over the axes it lacks
(``layouts/submesh.py``): in ops, ``clip_grad_norm_`` and foreach / fused
optimizers, eager and compiled. Meshes with no such relation still raise
``MeshMismatchError`` saying why. (Real ranks, FSDP2 + TP on torch's own
test Transformer: tests/multiprocess/submesh_worker.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.distributed.device_mesh import DeviceMesh as TorchMesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

import parity
import sequential_collectives
from parity import torch_impl as ti
from parity.torch_impl.layouts import submesh

RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 4)).astype(np.float32)
N = RNG.standard_normal((4,)).astype(np.float32)
TP_ONLY = (Replicate(), Shard(1))


@pytest.fixture
def sim4():
    with ti.simulate(4):
        yield ti


def _meshes():
    parent = TorchMesh("cpu", torch.arange(4).reshape(2, 2), mesh_dim_names=("dp", "tp"))
    return parent, parent["dp"]


def _sharded(parent, sub, placements=(Shard(0), Shard(1))):
    """The linear weight on ``(dp, tp)``, the norm weight on the ``dp``
    submesh, as FSDP2 + TP place them. (Compiled, a norm of a weight split
    over both axes logs DTensor's "2 sequential all_reduce" warning on one
    mesh already, which the suite forbids: there the weight is split over
    ``tp`` only.)"""
    w = distribute_tensor(torch.tensor(W), parent, list(placements)).requires_grad_()
    n = distribute_tensor(torch.tensor(N), sub, [Shard(0)]).requires_grad_()
    return w, n


def _plain():
    return torch.tensor(W, requires_grad=True), torch.tensor(N, requires_grad=True)


def _loss(w, n):
    return ((w.sum(1) * n) ** 2).sum() + (n * n * n).sum()


def _placed(ts):
    return [(t.device_mesh, tuple(t.placements)) for t in ts]


def test_an_op_across_a_submesh_gives_the_parent_s_array_and_the_gradient_its_placement(sim4):
    parent, sub = _meshes()
    w, n = _sharded(parent, sub)
    with ti.jax_semantics():
        y = w + n  # (4, 4) + (4,): n broadcast over rows
        assert y.device_mesh is parent
        assert ti.describe(y).spec == (("dp",), ("tp",))
        _loss(w, n).backward()
    np.testing.assert_allclose(ti.to_numpy(y.detach()), W + N, rtol=1e-6)
    pw, pn = _plain()
    _loss(pw, pn).backward()
    assert _placed([w.grad, n.grad]) == _placed([w, n])  # the submesh's own placement
    np.testing.assert_allclose(ti.to_numpy(n.grad), pn.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(ti.to_numpy(w.grad), pw.grad.numpy(), rtol=1e-5)


def test_a_pending_sum_on_the_submesh_is_completed_before_it_is_lifted(sim4):
    # n.sum() is pending over dp (Partial); lifted as it is, to_local of a
    # deferred sum completes it and Partial would count it twice
    parent, sub = _meshes()
    w, n = _sharded(parent, sub)
    with ti.jax_semantics():
        scaled = n.sum() * w
        mixed = (n * 2).sum() + w.sum(1)
        (scaled.sum() + mixed.sum()).backward()
    np.testing.assert_allclose(ti.to_numpy(scaled.detach()), N.sum() * W, rtol=1e-5)
    np.testing.assert_allclose(ti.to_numpy(mixed.detach()), 2 * N.sum() + W.sum(1), rtol=1e-5)
    pw, pn = _plain()
    ((pn.sum() * pw).sum() + ((pn * 2).sum() + pw.sum(1)).sum()).backward()
    assert _placed([n.grad]) == _placed([n])
    np.testing.assert_allclose(ti.to_numpy(n.grad), pn.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(ti.to_numpy(w.grad), pw.grad.numpy(), rtol=1e-5)


def test_a_stack_of_norms_over_both_meshes_is_the_reported_case(sim4):
    parent, sub = _meshes()
    w, n = _sharded(parent, sub)
    # plain DTensor (torch 2.15 logs its sequential all_reduce warning first)
    with pytest.raises(Exception, match="same mesh|cross-mesh"), sequential_collectives.collected():
        torch.stack([torch.linalg.vector_norm(w), torch.linalg.vector_norm(n)])
    with ti.jax_semantics():
        norms = torch.stack([torch.linalg.vector_norm(w), torch.linalg.vector_norm(n)])
    assert norms.device_mesh is parent
    np.testing.assert_allclose(ti.to_numpy(norms), [np.linalg.norm(W), np.linalg.norm(N)],
                               rtol=1e-6)


@pytest.mark.parametrize("foreach", [True, False])
def test_clip_grad_norm_over_a_mesh_and_its_submesh_equals_the_unsharded(sim4, foreach):
    parent, sub = _meshes()
    sharded, plain = list(_sharded(parent, sub)), list(_plain())
    _loss(*plain).backward()
    want = torch.nn.utils.clip_grad_norm_(plain, 1.0, foreach=foreach)
    with ti.jax_semantics():
        _loss(*sharded).backward()
        got = torch.nn.utils.clip_grad_norm_(sharded, 1.0, foreach=foreach)
    assert got.device_mesh is parent
    np.testing.assert_allclose(float(ti.to_numpy(got)), float(want), rtol=1e-5)
    assert _placed([p.grad for p in sharded]) == _placed(sharded)
    for p, q in zip(sharded, plain):
        np.testing.assert_allclose(ti.to_numpy(p.grad), q.grad.numpy(), rtol=1e-5, atol=1e-6)


def _steps(params, options, step=None):
    opt = torch.optim.AdamW(params, lr=0.1, weight_decay=0.1, **options)

    def one():
        opt.zero_grad()
        _loss(*params).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()

    for _ in range(2):
        one() if step is None else step(one)


def test_adamw_with_clipping_over_a_mesh_and_its_submesh_equals_the_unsharded(sim4):
    # fused=True: on real ranks only (tests/multiprocess/submesh_worker.py);
    # on simulated ranks plain DTensor's fused AdamW is wrong on one mesh already
    options = {"foreach": True}
    parent, sub = _meshes()
    sharded, plain = list(_sharded(parent, sub)), list(_plain())
    before = _placed(sharded)
    _steps(plain, options)
    with ti.jax_semantics():
        _steps(sharded, options)
    assert _placed(sharded) == before
    for p, q in zip(sharded, plain):
        np.testing.assert_allclose(ti.to_numpy(p.detach()), q.detach().numpy(),
                                   rtol=1e-5, atol=1e-6)


def test_compiled_ops_across_a_submesh_trace_without_a_graph_break(sim4):
    parent, sub = _meshes()
    w, n = _sharded(parent, sub, TP_ONLY)

    def forward(w, n):
        norms = torch.stack([torch.linalg.vector_norm(w), torch.linalg.vector_norm(n)])
        return _loss(w, n) + norms.sum(), norms.detach()

    torch._dynamo.reset()
    compiled = torch.compile(forward, backend="aot_eager", fullgraph=True, dynamic=False)
    with ti.jax_semantics():
        loss, norms = compiled(w, n)
        loss.backward()
    assert norms.device_mesh is parent and loss.device_mesh is parent
    pw, pn = _plain()
    want, _ = forward(pw, pn)
    want.backward()
    np.testing.assert_allclose(float(ti.to_numpy(loss.detach())), want.item(), rtol=1e-5)
    np.testing.assert_allclose(ti.to_numpy(norms), [np.linalg.norm(W), np.linalg.norm(N)],
                               rtol=1e-6)
    assert _placed([w.grad, n.grad]) == _placed([w, n])
    np.testing.assert_allclose(ti.to_numpy(n.grad), pn.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(ti.to_numpy(w.grad), pw.grad.numpy(), rtol=1e-5)


def test_a_compiled_clipped_step_over_a_submesh_equals_the_unsharded(sim4):
    # the optimizer's own step runs eagerly here: a compiled foreach AdamW
    # fails on simulated ranks on one mesh already (LocalTensor under
    # FunctionalTensorMode); compiled whole: tests/multiprocess/submesh_worker.py
    parent, sub = _meshes()
    sharded, plain = list(_sharded(parent, sub, TP_ONLY)), list(_plain())
    _steps(plain, {"foreach": True})

    def clipped(params):
        _loss(*params).backward()
        return torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)

    torch._dynamo.reset()
    compiled = torch.compile(clipped, backend="aot_eager", dynamic=False)
    opt = torch.optim.AdamW(sharded, lr=0.1, weight_decay=0.1, foreach=True)
    with ti.jax_semantics():
        for _ in range(2):
            opt.zero_grad()
            norm = compiled(sharded)
            opt.step()
    assert norm.device_mesh is parent
    for p, q in zip(sharded, plain):
        np.testing.assert_allclose(ti.to_numpy(p.detach()), q.detach().numpy(),
                                   rtol=1e-5, atol=1e-6)


def test_a_flattened_axis_is_a_slice_of_the_axes_it_joins():
    with ti.simulate(8):
        parent = TorchMesh("cpu", torch.arange(8).reshape(2, 2, 2),
                           mesh_dim_names=("dp", "cp", "tp"))
        flat = parent["dp", "cp"]._flatten("dp_cp")
        assert submesh.slice_axes(parent, flat) == (0, 0, -1)
        assert submesh.slice_axes(parent, parent["tp"]) == (-1, -1, 0)
        assert submesh.slice_axes(flat, parent) is None
        host = np.arange(32, dtype=np.float32).reshape(8, 4)
        x = distribute_tensor(torch.tensor(host), flat, [Shard(0)])
        y = distribute_tensor(torch.tensor(host), parent, [Replicate(), Replicate(), Shard(1)])
        with ti.jax_semantics():
            z = x + y
        assert z.device_mesh is parent
        np.testing.assert_array_equal(ti.to_numpy(z), 2 * host)


def test_a_mesh_built_apart_with_the_slice_s_ranks_is_a_slice(sim4):
    """No torch relation (another rank map): the names and the ranks through
    this rank say it (simulated: rank 0's view)."""
    parent, _ = _meshes()
    apart = TorchMesh("cpu", torch.tensor([[0, 2], [1, 3]]), mesh_dim_names=("tp", "dp"))["dp"]
    assert submesh._torch_axes(parent, apart) is None
    assert submesh.slice_axes(parent, apart) == (0, -1)
    n = distribute_tensor(torch.tensor(N), apart, [Shard(0)])
    w = distribute_tensor(torch.tensor(W), parent, [Shard(0), Shard(1)])
    with ti.jax_semantics():
        y = w * n
    assert y.device_mesh is parent
    np.testing.assert_allclose(ti.to_numpy(y), W * N, rtol=1e-6)


def _other(kind):
    if kind == "ranks":  # a "dp" axis over other ranks
        return TorchMesh("cpu", torch.tensor([[0, 2], [1, 3]]), mesh_dim_names=("dp", "tp"))["dp"]
    if kind == "names":
        return TorchMesh("cpu", torch.arange(4).reshape(2, 2), mesh_dim_names=("x", "y"))["x"]
    return TorchMesh("cpu", torch.arange(4), mesh_dim_names=("tp",))  # sizes


@pytest.mark.parametrize("kind, why", [
    ("ranks", r"ranks \[0, 1\] are not the \('dp',\) slice \[0, 2\] of \('dp', 'tp'\) "
              r"through rank 0"),
    ("names", r"axis names \(.*\) vs \(.*\)"),
    ("sizes", r"sizes \(4,\) are not the sizes \(2,\) of \('tp',\)"),
])
def test_meshes_that_are_not_slices_still_raise_saying_why(sim4, kind, why):
    parent, _ = _meshes()
    other = _other(kind)
    assert submesh.slice_axes(parent, other) is None
    w = distribute_tensor(torch.tensor(W), parent, [Shard(0), Shard(1)])
    n = distribute_tensor(torch.tensor(N), other, [Shard(0)])
    for first, second in ((w.sum(1), n), (n, w.sum(1))):
        with ti.jax_semantics(), pytest.raises(parity.MeshMismatchError, match=why) as raised:
            first * second
        assert {id(raised.value.first), id(raised.value.second)} == {id(parent), id(other)}


def test_an_in_place_op_on_a_submesh_operand_returns_that_operand(sim4):
    # g.mul_(c): g on the dp submesh, c on the parent. The write lands in g's
    # own block through the lifted view; the result is g itself, as torch's
    # in-place ops return their operand
    parent, sub = _meshes()
    g = distribute_tensor(torch.tensor(N), sub, [Shard(0)])
    c = distribute_tensor(torch.tensor(2.0), parent, [Replicate(), Replicate()])
    with ti.jax_semantics():
        out = g.mul_(c)
    assert out is g
    assert g.device_mesh is sub and tuple(g.placements) == (Shard(0),)
    np.testing.assert_allclose(ti.to_numpy(g), N * 2, rtol=1e-6)
