"""``jax_semantics()``'s fast path: a call already proven clean (no reshard,
no pending reduction, output already as JAX lays it out) runs the op
directly, and nothing else ever does."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import parity
from parity import torch_impl as ti
from parity.torch_impl.semantics import decision, fast_path, rules

L = parity.TensorLayout


def host(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.fixture
def mesh(sim8):
    fast_path.forget_all()
    yield parity.DeviceMesh((2, 4), ("data", "model"))
    fast_path.forget_all()


@pytest.fixture
def rule_calls(monkeypatch):
    calls = []
    real = rules.plan_for

    def counting(func, *args, **kwargs):
        calls.append(func.__name__)
        return real(func, *args, **kwargs)

    monkeypatch.setattr(rules, "plan_for", counting)
    return calls


def put(array, spec, mesh, requires_grad=False):
    out = ti.distribute_tensor(array, L(spec, mesh))
    return out.requires_grad_() if requires_grad else out


def test_a_repeated_clean_call_runs_the_rule_once(mesh, rule_calls):
    a, b = host((8, 16), 1), host((8, 16), 2)
    x, y = put(a, ("data", "model"), mesh), put(b, ("data", "model"), mesh)
    with ti.jax_semantics():
        outs = [x + y for _ in range(3)]
    assert rule_calls.count("add") == 1
    for out in outs:
        assert ti.describe(out).spec == (("data",), ("model",))
        np.testing.assert_allclose(ti.to_numpy(out), a + b)


def test_a_call_that_reshards_is_never_clean(mesh, rule_calls):
    """A contraction over a sharded dim completed at once (``defer=False``):
    the mode always works (its decision, cached per description of the call:
    the rule runs once) and the output is never a pending sum."""
    a, b = host((8, 16), 1), host((16, 4), 2)
    x, w = put(a, ("data", "model"), mesh), put(b, ("model", None), mesh)
    decision._decided.cache_clear()
    with ti.jax_semantics(defer=False):
        outs = [x @ w for _ in range(3)]
    assert rule_calls.count("matmul") == 1
    assert not fast_path.CLEAN
    for out in outs:
        assert not any(p.is_partial() for p in out.placements)
        np.testing.assert_allclose(ti.to_numpy(out), a @ b, rtol=1e-5, atol=1e-5)


OPS = {
    "add": lambda p, q: p + q,
    "mul_scalar": lambda p, q: p * 2.0,
    "mul_int": lambda p, q: p * 2,
    "relu": lambda p, q: torch.relu(p),
    "sum0": lambda p, q: p.sum(0),
    "sum1_keepdim": lambda p, q: p.sum(1, keepdim=True),
    "transpose": lambda p, q: p.t(),
    "reshape": lambda p, q: p.reshape(4, 32),
    "softmax": lambda p, q: torch.softmax(p, dim=-1),
    "where": lambda p, q: torch.where(p > 0, p, q),
}
SPECS = [("data", "model"), ("data", None), (None, "model"), ("model", "data"), (None, None)]


def test_cached_and_uncached_results_agree_over_layouts(mesh):
    """Every op on every pair of layouts, run twice in a shuffled order
    (the second run hits the cache wherever the first was clean): same
    placement and values as with the cache emptied before each call."""
    a, b = host((8, 16), 1), host((8, 16), 2)
    calls = [(op, sp, sq) for op in OPS for sp in SPECS for sq in SPECS]
    order = np.random.default_rng(0).permutation(len(calls) * 2) % len(calls)

    def outcome(op, sp, sq):
        with ti.jax_semantics():
            out = OPS[op](put(a, sp, mesh), put(b, sq, mesh))
        return ti.describe(out), ti.to_numpy(out)

    expected = {}
    for call in calls:
        fast_path.forget_all()
        expected[call] = outcome(*call)
    fast_path.forget_all()
    for i in order:
        got_placement, got_value = outcome(*calls[i])
        want_placement, want_value = expected[calls[i]]
        assert got_placement == want_placement, calls[i]
        np.testing.assert_allclose(got_value, want_value, rtol=1e-6, err_msg=str(calls[i]))
    assert fast_path.CLEAN, "no call was ever clean: the fast path is not used"


def test_a_leaf_weight_keeps_its_gradient_placement_on_repeated_steps(mesh):
    a, b = host((8, 16), 1), host((16, 32), 2)
    x = put(a, ("data", None), mesh)
    w = put(b, (None, "model"), mesh, requires_grad=True)
    for _ in range(3):
        w.grad = None
        with ti.jax_semantics():
            (torch.relu(x @ w) * 0.5).sum().backward()
        assert ti.describe(w.grad).spec == ((), ("model",))
        np.testing.assert_allclose(
            ti.to_numpy(w.grad), a.T @ (0.5 * (a @ b > 0)), rtol=1e-5, atol=1e-5)


def test_signatures_tell_scalar_types_and_options_apart(mesh):
    x = put(host((8, 16)), ("data", "model"), mesh)
    keys = {
        fast_path.signature(torch.mul, (x, value), {}, defer)
        for value in (2, 2.0, True) for defer in (False, True)
    }
    assert len(keys) == 6
    assert fast_path.signature(torch.mul, (x, torch.ones(16)), {}, False) is None
    assert fast_path.signature(torch.mul, (x, np.ones(16)), {}, False) is None


def test_a_passthrough_call_skips_the_rule_and_is_remembered_by_function(mesh, rule_calls):
    x = put(host((8, 16)), ("data", "model"), mesh)
    with ti.jax_semantics():
        sizes = [x.size() for _ in range(3)]
    assert sizes == [torch.Size([8, 16])] * 3 and rule_calls == []
    assert [getattr(f, "__name__", None) for f in fast_path.DIRECT] == ["size"]


def test_a_backward_entry_point_is_never_remembered_as_direct_or_clean(mesh):
    x = put(host((8, 16)), ("data", "model"), mesh, requires_grad=True)
    with ti.jax_semantics():
        for _ in range(2):
            (x * 2.0).sum().backward()
    remembered = list(fast_path.DIRECT) + [key[0] for key in fast_path.CLEAN]
    assert torch.Tensor.backward not in remembered
    assert ti.describe(x.grad).spec == (("data",), ("model",))


def test_a_clean_call_without_grad_does_not_let_a_grad_call_skip_the_backward_fallback(mesh):
    """hardtanh has no DTensor backward (fallback.BACKWARD_MISSING): remembered
    clean from a call whose operand needs no gradient, the same layout with a
    non-leaf operand that needs one must still take the fallback."""
    import torch.nn.functional as F

    a = host((8, 16))
    with ti.jax_semantics():
        F.hardtanh(ti.distribute_tensor(a, L(("data", "model"), mesh)))
        leaf = ti.distribute_tensor(a, L(("data", "model"), mesh)).requires_grad_()
        y = F.hardtanh(leaf * 1.0)  # a non-leaf that requires grad
        y.sum().backward()
    want = ((a >= -1) & (a <= 1)).astype(np.float32)
    np.testing.assert_allclose(ti.to_numpy(leaf.grad), want)
    assert tuple(leaf.grad.placements) == tuple(leaf.placements)


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_a_binary_ops_inline_signature_is_the_one_signature_builds(mesh, monkeypatch, grad):
    # The mode builds the key of a two-DTensor call inline (its hot path);
    # it must be the very tuple fast_path.signature gives for that call.
    remembered = []
    real = fast_path.remember
    monkeypatch.setattr(fast_path, "remember", lambda key: (remembered.append(key), real(key)))
    x = put(host((8, 16), 1), ("data", "model"), mesh, requires_grad=grad)
    y = put(host((8, 16), 2), ("data", "model"), mesh)
    with torch.set_grad_enabled(grad), ti.jax_semantics():
        h = x * y     # with grad: x is a leaf that needs one, never remembered
        h2 = h * y    # roles (1, 0) with grad; without, the key of x * y: a hit
        h2 - h        # roles (1, 1)
        pairs = [(h, y), (h2, h)] if grad else [(x, y), (h2, h)]
        assert len(remembered) == len(pairs), remembered
        expected = [fast_path.signature(k[0], pair, None, True)
                    for k, pair in zip(remembered, pairs)]
    assert remembered == expected
    assert [k[4::2] for k in remembered] == ([(1, 0), (1, 1)] if grad else [(0, 0)] * 2)


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_a_unary_ops_inline_signature_is_the_one_signature_builds(mesh, monkeypatch, grad):
    remembered = []
    real = fast_path.remember
    monkeypatch.setattr(fast_path, "remember", lambda key: (remembered.append(key), real(key)))
    x = put(host((8, 16), 1), ("data", "model"), mesh, requires_grad=grad)
    with torch.set_grad_enabled(grad), ti.jax_semantics():
        h = torch.relu(x)  # with grad: x is a leaf that needs one, never remembered
        torch.neg(h)
        torch.neg(h)       # a hit: remembered once
        operands = [h] if grad else [x, h]
        assert len(remembered) == len(operands), remembered
        expected = [fast_path.signature(k[0], (t,), None, True)
                    for k, t in zip(remembered, operands)]
    assert remembered == expected
    assert [k[4] for k in remembered] == ([1] if grad else [0, 0])


def test_the_signature_carries_the_innermost_scopes_defer_option(mesh, monkeypatch):
    remembered = []
    real = fast_path.remember
    monkeypatch.setattr(fast_path, "remember", lambda key: (remembered.append(key), real(key)))
    x = put(host((8, 16), 1), ("data", "model"), mesh)
    with ti.jax_semantics(defer=False):
        x + x
        with ti.jax_semantics():  # the default: defer=True
            x + x
            torch.neg(x)
        x + x  # the defer=False key again: a hit
        torch.neg(x)
    assert [(k[0].__name__, k[2]) for k in remembered] == [
        ("add", False), ("add", True), ("neg", True), ("neg", False)]


@pytest.fixture
def full_path(monkeypatch):
    """The names of the calls that take the mode's whole rule (``mode._run``)."""
    from parity.torch_impl.semantics import mode

    names = []
    real = mode._run

    def counting(func, name, *args, **kwargs):
        names.append(name)
        return real(func, name, *args, **kwargs)

    monkeypatch.setattr(mode, "_run", counting)
    return names


def test_a_plain_scalar_tensor_operand_is_handed_to_dtensor_once_proven(mesh, full_path):
    """An optimizer's step count or learning rate, a plain 0-dim tensor, next
    to a DTensor: the first call replicates it on the mesh (``promote``);
    later calls with the same signature (its dtype and device, not its
    value) hand it to DTensor as it is, which replicates a one-element
    tensor itself -- the same values and placements, no ``from_local``."""
    a = host((8, 16), 1)
    x = put(a, ("data", "model"), mesh)
    with ti.jax_semantics():
        outs = [x * torch.tensor(float(k)) for k in (2, 3, 4)]
        flipped = [torch.tensor(float(k)) - x for k in (2, 3)]
    assert full_path == ["mul", "sub"]
    for k, out in zip((2, 3, 4), outs):
        assert ti.describe(out).spec == (("data",), ("model",))
        np.testing.assert_allclose(ti.to_numpy(out), a * k)
    for k, out in zip((2, 3), flipped):
        assert ti.describe(out).spec == (("data",), ("model",))
        np.testing.assert_allclose(ti.to_numpy(out), k - a)


@pytest.mark.parametrize("case", [
    "needs a gradient", "one dim", "written in place", "numpy"])
def test_plain_operands_dtensor_would_not_replicate_always_take_the_rule(mesh, full_path, case):
    """A plain operand that needs a gradient (its gradient comes back
    through the promotion), one with a dim (DTensor refuses it), an in-place
    op on such a call, or a numpy array: every call takes the whole rule."""
    a = host((8, 16), 1)
    x = put(a, ("data", "model"), mesh)
    calls = {"needs a gradient": lambda: x * torch.tensor(2.0, requires_grad=True),
             "one dim": lambda: x * torch.full((16,), 2.0),
             "written in place": lambda: x.clone().mul_(torch.tensor(2.0)),
             "numpy": lambda: x * np.float32(2.0) * np.ones((16,), np.float32)}
    with ti.jax_semantics():
        outs = [calls[case]() for _ in range(3)]
    taken = [n for n in full_path if n in ("mul", "mul_")]
    assert len(taken) >= 3, full_path
    for out in outs:
        np.testing.assert_allclose(ti.to_numpy(out), a * 2.0, rtol=1e-6)
