"""DTensor code that names the placements it expects keeps them under
``jax_semantics()``, with the communication it asked for.

torch's tensor parallelism (and torchtitan's module contracts) declare a
row-parallel ``Linear``'s output a pending sum (``Partial``) and redistribute
it themselves: an all-reduce to ``Replicate``, or one reduce-scatter to
``Shard`` under sequence parallelism. Under the scope a contraction's pending
sum stays pending until that redistribute (JAX's compiler is equally free to
place the reduction), while ``describe`` and ``typeof`` report JAX's
placement and the values never change. Each test shows plain DTensor beside
parity.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

from parity import torch_impl as ti


@pytest.fixture
def mesh():
    with ti.simulate(4):
        from torch.distributed.device_mesh import init_device_mesh

        yield init_device_mesh("cpu", (4,), mesh_dim_names=("tp",))


def _counts(comm: CommDebugMode) -> dict[str, int]:
    return {str(op).split(".")[-1]: n for op, n in comm.get_comm_counts().items()}


def test_a_linear_contracting_a_sharded_dim_stays_a_pending_sum(mesh):
    torch.manual_seed(0)
    xf, wf = torch.randn(4, 8), torch.randn(6, 8)
    x = distribute_tensor(xf, mesh, [Shard(1)])
    w = distribute_tensor(wf, mesh, [Shard(1)])
    plain = F.linear(x, w)
    with ti.jax_semantics():
        ours = F.linear(x, w)
        described = ti.describe(ours)
        typed = str(ti.typeof(ours))
    assert tuple(plain.placements) == (Partial("sum"),)
    assert tuple(ours.placements) == (Partial("sum"),)  # as plain DTensor: still pending
    assert described.spec == ((), ()) and described.pending == ()  # JAX's: reduced
    assert typed == "float32[4,6]"
    np.testing.assert_allclose(ti.to_numpy(ours), xf.numpy() @ wf.numpy().T, rtol=1e-5, atol=1e-5)


def test_defer_false_completes_the_sum_at_once(mesh):
    x = distribute_tensor(torch.randn(4, 8), mesh, [Shard(1)])
    w = distribute_tensor(torch.randn(6, 8), mesh, [Shard(1)])
    with ti.jax_semantics(defer=False):
        assert tuple(F.linear(x, w).placements) == (Replicate(),)


def _mlp(mesh, output_layout):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32, bias=False), nn.ReLU(), nn.Linear(32, 16, bias=False))
    reference = nn.Sequential(*[m for m in model])  # same parameters, before sharding
    weights = [p.detach().clone() for p in model.parameters()]
    plan = {"0": ColwiseParallel(),
            "2": RowwiseParallel(output_layouts=output_layout, use_local_output=False)}
    parallelize_module(model, mesh, plan)
    return model, reference, weights


@pytest.mark.parametrize("output_layout, collective", [
    (Replicate(), "all_reduce"), (Shard(0), "reduce_scatter_tensor")],
    ids=["replicate", "sequence-parallel"])
def test_rowwise_parallel_redistributes_its_own_pending_sum_once(mesh, output_layout, collective):
    # plain DTensor: one all-reduce, or one reduce-scatter under sequence
    # parallelism; parity used to complete the sum first (an all-reduce, then
    # a slice), which torchtitan's module contract refused
    torch.manual_seed(1)
    x = torch.randn(8, 16)
    model, _, weights = _mlp(mesh, output_layout)
    with CommDebugMode() as plain_comm:
        plain = model(x)
    with ti.jax_semantics(), CommDebugMode() as comm:
        ours = model(x)
    assert _counts(plain_comm) == {collective: 1}
    assert _counts(comm) == {collective: 1}
    assert tuple(ours.placements) == tuple(plain.placements)
    w0, w1 = (w.numpy() for w in weights)
    expected = np.maximum(x.numpy() @ w0.T, 0) @ w1.T
    np.testing.assert_allclose(ti.to_numpy(ours), expected, rtol=1e-5, atol=1e-5)


def test_rowwise_parallel_gradients_equal_unsharded(mesh):
    torch.manual_seed(2)
    x = torch.randn(8, 16)
    model, _, weights = _mlp(mesh, Shard(0))
    with ti.jax_semantics():
        model(x).pow(2).sum().backward()
    # d/dW of sum((relu(x W0^T) W1^T)^2), in numpy
    xn, w0, w1 = x.numpy(), *(w.numpy() for w in weights)
    h = x.numpy() @ w0.T
    a = np.maximum(h, 0)
    g_out = 2 * (a @ w1.T)
    g_w1 = g_out.T @ a
    g_w0 = ((g_out @ w1) * (h > 0)).T @ xn
    grads = [p.grad for p in model.parameters()]
    assert [tuple(g.placements) for g in grads] == [(Shard(0),), (Shard(1),)]
    np.testing.assert_allclose(ti.to_numpy(grads[0]), g_w0, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ti.to_numpy(grads[1]), g_w1, rtol=1e-4, atol=1e-4)


def test_a_compiled_linear_keeps_the_pending_sum(mesh):
    # the smallest form of torchtitan's compiled block: dynamo traces the
    # scope's op path with the pending sum kept (fullgraph: no graph break)
    torch.manual_seed(3)
    xf, wf = torch.randn(4, 8), torch.randn(6, 8)
    x = distribute_tensor(xf, mesh, [Shard(1)])
    w = distribute_tensor(wf, mesh, [Shard(1)])
    torch._dynamo.reset()
    linear = torch.compile(lambda x, w: F.linear(x, w), backend="aot_eager", fullgraph=True)
    with ti.jax_semantics():
        out = linear(x, w)
        local = out.to_local()  # a deferred sum is completed for to_local
    assert tuple(out.placements) == (Partial("sum"),)
    expected = xf.numpy() @ wf.numpy().T
    np.testing.assert_allclose(ti.to_numpy(out), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(local._local_tensors[0].numpy(), expected, rtol=1e-5, atol=1e-5)


def test_opening_the_scope_in_a_fresh_process_changes_no_dtensor_method():
    # the to_local hook is installed when a scope opens, never by the import
    code = textwrap.dedent("""
        from torch.distributed.tensor import DTensor
        before = DTensor.to_local
        import parity.torch_impl
        assert DTensor.to_local is before, "importing parity changed DTensor.to_local"
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]
