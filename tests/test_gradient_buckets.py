"""The gradient reductions of one ``backward()`` in one launch per group
(issue 24, item 3; ``parity.torch_impl.collectives.gradient_buckets``).

The tensor-parallel MLP on mesh (2, 2) (``batch``, ``model``; x's rows on
``batch``): both weight gradients are pending sums on ``batch``. Under
``backward()`` they are completed by one all_reduce at the end; the
reference is ``torch.autograd.grad``, which runs with no bucket (one
all_reduce per weight, as every backward did before). Launches are counted
with torch's ``CommDebugMode`` on simulated ranks.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.distributed.tensor.debug import CommDebugMode

from parity import DeviceMesh, TensorLayout
from parity import torch_impl as T


def _host(shape, seed):
    return (np.random.default_rng(seed).standard_normal(shape) * 0.3).astype(np.float32)


def _all_reduces(comm: CommDebugMode) -> int:
    return sum(n for op, n in comm.get_comm_counts().items() if "all_reduce" in str(op))


def _tp_mlp():
    """``(x, [w1, w2], loss_fn)``: a tensor-parallel MLP on a (2, 2) mesh
    (inside ``simulate(4)``)."""
    mesh = DeviceMesh((2, 2), ("batch", "model"))
    x = T.distribute_tensor(_host((8, 16), 0), TensorLayout(("batch", None), mesh))
    params = [T.distribute_variable(_host((16, 32), 1), TensorLayout((None, "model"), mesh)),
              T.distribute_variable(_host((32, 8), 2), TensorLayout(("model", None), mesh))]

    def loss_fn():
        return (torch.tanh(x @ params[0]) @ params[1] - 1).pow(2).mean()

    return x, params, loss_fn


@pytest.fixture
def mlp():
    """``_tp_mlp()`` on 4 simulated ranks, inside ``jax_semantics()``."""
    with T.simulate(4), T.jax_semantics():
        yield _tp_mlp()


def _reference(params, loss_fn):
    """The gradients with no bucket (``autograd.grad``), and its launch count."""
    loss = loss_fn()
    with CommDebugMode() as comm:
        grads = torch.autograd.grad(loss, params)
    return grads, _all_reduces(comm)


def _record(seen: dict, name: str, value) -> None:
    seen[name] = value.full_tensor()  # hooks return None: the gradient is not replaced


def _same(got, want) -> None:
    assert tuple(got.placements) == tuple(want.placements)
    np.testing.assert_array_equal(T.to_numpy(got), T.to_numpy(want))


def test_backward_completes_both_weight_gradients_in_one_all_reduce(mlp):
    _, params, loss_fn = mlp
    want, unbucketed = _reference(params, loss_fn)
    loss = loss_fn()
    with CommDebugMode() as comm:
        loss.backward()
    # without the bucket: the loss's pending mean and each gradient, one
    # launch each; with it, all three in one
    assert (unbucketed, _all_reduces(comm)) == (3, 1)
    for p, g in zip(params, want):
        _same(p.grad, g)
        assert tuple(p.grad.placements) == tuple(p.placements)


def test_a_grad_read_inside_the_backward_sees_the_completed_gradient(mlp):
    x, params, _ = mlp
    want, _ = _reference(params, lambda: (torch.tanh(x @ params[0]) @ params[1] - 1).pow(2).mean())
    seen = {}
    h = torch.tanh(x @ params[0])
    # h's gradient is computed after w2's and before w1's: w2.grad waits in the bucket
    h.register_hook(lambda g: _record(seen, "w2", params[1].grad))
    (h @ params[1] - 1).pow(2).mean().backward()
    np.testing.assert_array_equal(seen["w2"].numpy(), T.to_numpy(want[1]))
    for p, g in zip(params, want):
        _same(p.grad, g)


def test_hooks_on_a_leaf_see_the_completed_gradient(mlp):
    _, params, loss_fn = mlp
    want, _ = _reference(params, loss_fn)
    seen = {}
    params[0].register_hook(lambda g: _record(seen, "hook", g))
    params[1].register_post_accumulate_grad_hook(lambda p: _record(seen, "post", p.grad))
    loss_fn().backward()
    np.testing.assert_array_equal(seen["hook"].numpy(), T.to_numpy(want[0]))
    np.testing.assert_array_equal(seen["post"].numpy(), T.to_numpy(want[1]))
    for p, g in zip(params, want):
        _same(p.grad, g)


def test_a_weight_used_thrice_gets_the_unbucketed_gradient(mlp):
    """w1 reached by three ops: its gradients are completed one by one and
    summed, as without a bucket (one of them reduced later and added last
    would round differently)."""
    x, params, loss_fn = mlp

    def thrice():
        return loss_fn() + (x @ params[0]).pow(2).mean() * 3 + (x @ params[0]).sin().mean()

    want, _ = _reference(params, thrice)
    thrice().backward()
    for p, g in zip(params, want):
        _same(p.grad, g)


def test_gradients_accumulate_over_two_backwards(mlp):
    _, params, loss_fn = mlp
    want, _ = _reference(params, loss_fn)
    loss_fn().backward()
    loss_fn().backward()  # .grad holds a completed gradient: added to as before
    for p, g in zip(params, want):
        np.testing.assert_array_equal(T.to_numpy(p.grad), 2 * T.to_numpy(g))
        assert tuple(p.grad.placements) == tuple(p.placements)


def test_a_pending_loss_is_reduced_with_the_gradients_under_defer():
    """``defer=True`` keeps the loss's mean pending: ``backward()`` reduces it
    in the gradients' launch, and reading the loss afterwards launches
    nothing more. Loss and gradients equal the unbucketed ones."""
    with T.simulate(4), T.jax_semantics(defer=True):
        _, params, loss_fn = _tp_mlp()
        want, _ = _reference(params, loss_fn)
        want_loss = T.to_numpy(loss_fn())
        loss = loss_fn()
        assert any(p.is_partial() for p in loss.placements)  # pending until the backward
        with CommDebugMode() as comm:
            loss.backward()
        assert _all_reduces(comm) == 1
        with CommDebugMode() as comm:
            got_loss = T.to_numpy(loss)
            again = T.to_numpy(loss)
        assert _all_reduces(comm) == 0
        np.testing.assert_array_equal(got_loss, want_loss)
        np.testing.assert_array_equal(again, want_loss)
        for p, g in zip(params, want):
            _same(p.grad, g)


def _step_launches(defer: bool):
    """One step of ``_tp_mlp`` on 4 simulated ranks under
    ``jax_semantics(defer=defer)`` (forward, ``backward()``, the loss read):
    ``(collectives launched by op name, loss, [(grad, placements)])``."""
    with T.simulate(4), T.jax_semantics(defer=defer):
        _, params, loss_fn = _tp_mlp()
        with CommDebugMode() as comm:
            loss = loss_fn()
            loss.backward()
            value = T.to_numpy(loss)
        return ({str(op): n for op, n in comm.get_comm_counts().items()}, value,
                [(T.to_numpy(p.grad), tuple(p.grad.placements)) for p in params])


def test_the_mlp_step_under_defer_launches_jax_s_two_all_reduces():
    """JAX's compiled step launches 2 all-reduces (``test_collective_counts``
    reads them from its HLO); so does ``defer=True``: the forward's partial
    sum on ``model``, completed before ``- 1`` (a scalar added to a pending
    sum is not linear) by one all_reduce; the loss's pending mean on
    ``batch`` and both weight gradients in the bucket's one all_reduce. The
    default semantics launch 3 (the loss completed in the forward). Loss,
    gradients and placements are the same bit for bit. (The forward's sum
    was left to DTensor before: a reduce-scatter and three all-gathers.)"""
    default, deferred = _step_launches(False), _step_launches(True)
    assert default[0] == {"c10d_functional.all_reduce": 3}, default[0]
    assert deferred[0] == {"c10d_functional.all_reduce": 2}, deferred[0]
    np.testing.assert_array_equal(deferred[1], default[1])
    for (got, got_placements), (want, want_placements) in zip(deferred[2], default[2]):
        assert got_placements == want_placements
        np.testing.assert_array_equal(got, want)


def test_the_remembered_loss_is_differentiable():
    """Under ``defer=True`` the loss reduced in the bucket is the loss's
    completion from then on: a second backward through a function of it
    (the graph kept) gives what a loss completed on its own gives."""
    with T.simulate(4), T.jax_semantics(defer=True):
        mesh = DeviceMesh((2, 2), ("batch", "model"))
        x = T.distribute_tensor(_host((8, 16), 0), TensorLayout(("batch", None), mesh))
        w = T.distribute_variable(_host((16, 4), 1), TensorLayout((None, "model"), mesh))
        (want,) = torch.autograd.grad(torch.tanh(x @ w).mean().exp(), [w])
        loss = torch.tanh(x @ w).mean()
        loss.backward(retain_graph=True)
        w.grad = None
        with CommDebugMode() as comm:
            grown = loss.exp()  # exp completes the loss: the remembered completion
        assert _all_reduces(comm) == 0
        grown.backward()
        _same(w.grad, want)


def test_the_bucket_keeps_nothing_on_the_parameters(mlp):
    """No attribute of parity's on a trained parameter (it would go into
    pickles and deep copies of the parameter)."""
    _, params, loss_fn = mlp
    loss_fn().backward()
    for p in params:
        assert not [k for k in vars(p) if k.startswith("_parity")], vars(p).keys()


def test_a_sum_pending_on_a_size_one_axis_is_relabeled_not_redistributed(monkeypatch):
    """Mesh (1, 4): the weight gradients are pending sums on ``batch``, of
    size 1, which moves nothing. Their completion, and
    the forward's completions on ``batch``, relabel the block
    (``collectives.relabel``) instead of calling ``DTensor.redistribute``;
    loss, gradients and placements equal those of the redistribute path
    (the relabel turned off), and the launches are the same (the forward's
    partial sum on ``model``)."""
    from torch.distributed.tensor import DTensor

    from parity.torch_impl.collectives import redistribute

    calls = []
    original = DTensor.redistribute

    def counted(self, *args, **kwargs):
        calls.append(tuple(self.placements))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(DTensor, "redistribute", counted)

    def step():
        calls.clear()
        with T.simulate(4), T.jax_semantics():
            mesh = DeviceMesh((1, 4), ("batch", "model"))
            x = T.distribute_tensor(_host((8, 16), 0), TensorLayout(("batch", None), mesh))
            params = [T.distribute_variable(_host((16, 32), 1), TensorLayout((None, "model"), mesh)),
                      T.distribute_variable(_host((32, 8), 2), TensorLayout(("model", None), mesh))]
            with CommDebugMode() as comm:
                loss = (torch.tanh(x @ params[0]) @ params[1] - 1).pow(2).mean()
                loss.backward()
            return (len(calls), _all_reduces(comm), T.to_numpy(loss),
                    [(T.to_numpy(p.grad), tuple(p.grad.placements)) for p in params])

    relabeled = step()
    # gradient_buckets' leaf nodes complete through redistribute.merged
    monkeypatch.setattr(redistribute, "is_relabel", lambda x, placements: False)
    redistributed = step()
    # the loss's mean stays pending (the default scope), so the forward
    # completes nothing on batch: one redistribute left where the relabel
    # runs, three without it
    assert (relabeled[0], redistributed[0]) == (1, 3)
    assert relabeled[1] == redistributed[1] == 1
    np.testing.assert_array_equal(relabeled[2], redistributed[2])
    for (got, got_placements), (want, want_placements) in zip(relabeled[3], redistributed[3]):
        assert got_placements == want_placements
        np.testing.assert_array_equal(got, want)
