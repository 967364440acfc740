"""``semantics/decision``: the mode takes its decision around an op (JAX's
plan, each operand's completion, reshard and leaf guard) from the rule run
once per description of the call, on stand-in DTensors rebuilt from it
(placements, shape, dtype, ``requires_grad``, ``is_leaf``, constants),
eagerly and outside dynamo's trace under ``torch.compile``. That decision
must be the one made from the real operands: checked here on 8 simulated
ranks, for each rule family a training step meets (the compiled steps
themselves: ``test_compiled_stack.py``, ``test_compiled_step.py``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import parity
from parity import torch_impl as ti
from parity.torch_impl.semantics import decision, rules

L = parity.TensorLayout


def host(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def calls(mesh):
    x = ti.distribute_tensor(host((8, 16)), L(("data", "model"), mesh))
    w = ti.distribute_variable(host((4, 16)), L((None, "model"), mesh))
    b = ti.distribute_tensor(host((4,)), L((None,), mesh))
    y = ti.distribute_tensor(host((16, 4), 1), L(("model", None), mesh))
    r = ti.distribute_tensor(host((8, 16), 2), L((None, "data"), mesh))
    return [
        ("add", torch.add, (x, r), {}),
        ("mul scalar", torch.Tensor.mul, (x, 2.0), {}),
        ("matmul", torch.matmul, (x, y), {}),
        ("linear", F.linear, (x, w), {}),
        ("linear, bias", F.linear, (x, w, b), {}),
        ("linear, keywords", F.linear, (x,), {"weight": w, "bias": b}),
        ("sum dim", torch.sum, (x, 1), {}),
        ("mean keepdim", torch.Tensor.mean, (x,), {"dim": (0,), "keepdim": True}),
        ("softmax", F.softmax, (x, -1), {}),
        ("transpose", torch.transpose, (x, 0, 1), {}),
        ("cat", torch.cat, ([x, r], 0), {}),
        ("layer_norm", F.layer_norm, (x, (16,)), {}),
    ]


def from_operands(func, args, kwargs, mesh, defer, grad):
    """The decision made from the real operands (``decision._decide``, as
    for a call no description covers)."""
    plan = rules.plan_for(func, args, kwargs, mesh)
    if plan is not None:
        fix = None if plan.fix is None else tuple(plan.fix.items())
        plan = (tuple(plan.inputs.items()), plan.outputs, plan.linear, plan.chosen, fix)
    facts = [(loc, tuple(t.placements), t.ndim, t.requires_grad, t.is_leaf)
             for loc, t in decision.operands(args, kwargs)]
    return decision._decide(plan, facts, mesh, defer, grad)


def comparable(found):
    plan, actions, keep_partial = found
    if plan is not None and callable(plan[1]):
        plan = plan[:1] + ("callable",) + plan[2:]
    return plan, actions, keep_partial


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("index", range(12))
def test_decision_from_the_description_is_the_decision_from_the_operands(sim8, index, grad):
    mesh = parity.DeviceMesh((2, 4), ("data", "model"))
    name, func, args, kwargs = calls(mesh)[index]
    torch_mesh = ti.to_torch_mesh(mesh)
    described = decision.describe(args, kwargs)
    assert described is not None, name
    with torch.set_grad_enabled(grad):
        want = from_operands(func, args, kwargs, torch_mesh, False, grad)
        found = decision._decided(func, described, torch_mesh, False, grad)
        if found is None:  # a plan whose output specs are a function of the outputs
            assert callable(want[0][1]), name
        else:
            assert found == want, name
        got = decision.decision_for(func, args, kwargs, torch_mesh, False, grad)
        assert comparable(got) == comparable(want), name
    if grad and name in ("linear", "linear, bias", "linear, keywords"):
        # w is a leaf that needs a gradient: guarded, through its own spec at least
        (_, w_action) = found[1][:2]
        assert w_action[2] is True and w_action[1] is not None, name


def test_a_call_with_a_plain_tensor_or_object_is_not_described(sim8):
    mesh = parity.DeviceMesh((2, 4), ("data", "model"))
    x = ti.distribute_tensor(host((8, 16)), L(("data", "model"), mesh))
    assert decision.describe((x, torch.ones(16)), {}) is None
    assert decision.describe((x,), {"out": object()}) is None
    assert decision.describe((x, [x, 1.0, None]), {"dim": torch.Size([1])}) is not None
    # a constant is keyed by its type too (1, 1.0 and True are equal keys)
    assert len({decision.describe((x, c), {}) for c in (2, 2.0, True, 1)}) == 4
    described = decision.describe((x,), {"size": torch.Size([16, 8])})
    assert decision._rebuild(described[1][0][1], x.device_mesh) == torch.Size([16, 8])


def test_eager_calls_take_the_cached_decision(sim8):
    """Eagerly too the decision is the cached one: a call that reshards (so
    never on the fast path) is decided once per description, and a call
    with an argument no constant describes (a ``slice``) is decided from its
    operands by the same function; the values are the unsharded program's."""
    mesh = parity.DeviceMesh((2, 4), ("data", "model"))
    a, b = host((8, 16)), host((8, 16), 1)
    x = ti.distribute_tensor(a, L(("data", "model"), mesh))
    r = ti.distribute_tensor(b, L((None, "data"), mesh))
    decision._decided.cache_clear()
    with ti.jax_semantics():
        for _ in range(3):
            out = x + r
        sliced = x[:, 2:6]
    info = decision._decided.cache_info()
    assert info.misses == 1 and info.hits >= 2
    assert decision.describe((x, slice(2, 6)), {}) is None
    np.testing.assert_allclose(ti.to_numpy(out), a + b)
    np.testing.assert_allclose(ti.to_numpy(sliced), a[:, 2:6])


@pytest.mark.parametrize("defer", [False, True])
def test_a_compiled_step_takes_the_decision_made_outside_the_trace(sim8, defer):
    """Under ``torch.compile`` the mode's decision around each op -- the
    plan, each operand's completion, reshard and leaf guard, each output's
    completion, deferral or reshard -- comes from ``decision_for`` /
    ``output_action`` (run outside the trace), and gives eager's values,
    specs and gradient placement (a contraction over a split dim leaves a
    pending sum: completed, or with ``defer`` kept through the add)."""
    mesh = parity.DeviceMesh((2, 4), ("data", "model"))
    x = ti.distribute_tensor(host((8, 16)), L(("data", "model"), mesh))

    def step(x, w):
        y = x @ w  # contracting dim split over "model": a pending sum
        return (torch.tanh(y) + y * 2.0).sum(0)

    results = []
    for compiled in (False, True):
        w = ti.distribute_variable(host((16, 4), 1), L(("model", None), mesh))
        with ti.jax_semantics(defer=defer):
            if compiled:
                decision._decided.cache_clear()
                decision._output_action.cache_clear()
                torch._dynamo.reset()
                out = torch.compile(step, backend="aot_eager", fullgraph=True, dynamic=False)(x, w)
                assert decision._decided.cache_info().misses >= 4  # every op decided
                assert decision._output_action.cache_info().misses >= 1
            else:
                out = step(x, w)
            out.sum().backward()
        results.append((ti.to_numpy(out), ti.describe(out).spec, ti.to_numpy(w.grad),
                        tuple(w.grad.placements)))
    (want, want_spec, want_grad, want_grad_p), (got, spec, grad, grad_p) = results
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert spec == want_spec
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-6)
    assert grad_p == want_grad_p
