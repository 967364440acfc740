"""``semantics/traced_plans``: under ``torch.compile`` the mode takes JAX's
plan for an op from the rule run outside dynamo's trace, on stand-in
DTensors rebuilt from the call's description (placements, shape, stride,
dtype, ``requires_grad``, constants). That plan must be the plan the rule
gives for the real operands: checked here eagerly, on 8 simulated ranks,
for each rule family a training step meets (the compiled steps themselves:
``test_compiled_stack.py``, ``test_compiled_step.py``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import parity
from parity import torch_impl as ti
from parity.torch_impl.semantics import rules, traced_plans

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


def as_constants(plan):
    if plan is None or callable(plan.outputs):
        return plan if plan is None else "callable"
    return tuple(plan.inputs.items()), plan.outputs, plan.linear, plan.chosen


@pytest.mark.parametrize("index", range(12))
def test_plan_from_the_description_is_the_rules_plan(sim8, index):
    mesh = parity.DeviceMesh((2, 4), ("data", "model"))
    name, func, args, kwargs = calls(mesh)[index]
    torch_mesh = ti.to_torch_mesh(mesh)
    described = traced_plans.describe(args, kwargs)
    assert described is not None, name
    found = traced_plans._plan_cached(func, described, torch_mesh)
    want = as_constants(rules.plan_for(func, args, kwargs, torch_mesh))
    assert (found if found != traced_plans._TRACED else "callable") == want, name


def test_a_call_with_a_plain_tensor_or_object_is_not_described(sim8):
    mesh = parity.DeviceMesh((2, 4), ("data", "model"))
    x = ti.distribute_tensor(host((8, 16)), L(("data", "model"), mesh))
    assert traced_plans.describe((x, torch.ones(16)), {}) is None
    assert traced_plans.describe((x,), {"out": object()}) is None
    assert traced_plans.describe((x, [x, 1.0, None]), {"dim": torch.Size([1])}) is not None
    described = traced_plans.describe((x,), {"size": torch.Size([16, 8])})
    assert traced_plans._rebuild(described[1][0][1], x.device_mesh) == torch.Size([16, 8])


def test_eagerly_plan_for_is_the_rules_plan(sim8):
    mesh = parity.DeviceMesh((2, 4), ("data", "model"))
    x = ti.distribute_tensor(host((8, 16)), L(("data", "model"), mesh))
    y = ti.distribute_tensor(host((16, 4), 1), L(("model", None), mesh))
    got = traced_plans.plan_for(torch.matmul, (x, y), {}, x.device_mesh)
    assert got == rules.plan_for(torch.matmul, (x, y), {}, x.device_mesh)


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
                traced_plans._decision_cached.cache_clear()
                traced_plans._output_action.cache_clear()
                torch._dynamo.reset()
                out = torch.compile(step, backend="aot_eager", fullgraph=True, dynamic=False)(x, w)
                assert traced_plans._decision_cached.cache_info().misses >= 4  # every op decided
                assert traced_plans._output_action.cache_info().misses >= 1
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
