"""The collectives' cached plans belong to one runtime generation.

A plan holds the process group it calls. A torch mesh object can outlive its
process groups (a DTensor kept across two ``simulate()`` blocks, or across
``destroy_process_group`` and a new ``init_process_group``); a plan cached
for it must not be handed to the next generation, where its group is gone."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

import parity
from parity import torch_impl as ti
from parity.torch_impl.collectives import eager

ROOT = Path(__file__).resolve().parents[1]


def test_a_new_simulate_block_builds_its_plans_again(monkeypatch):
    built = []
    real = eager._build_plan

    def counting(*args):
        built.append(args[1])
        return real(*args)

    monkeypatch.setattr(eager, "_build_plan", counting)
    host = np.arange(16, dtype=np.float32).reshape(4, 4)
    with ti.simulate(4):
        mesh = parity.DeviceMesh((4,), ("x",))
        x = ti.distribute_tensor(host, parity.TensorLayout(("x", None), mesh))
        for _ in range(3):
            ti.all_reduce(x, "sum", axis_name="x")
    assert built == ["all_reduce"]  # one plan for the three calls
    with ti.simulate(4):  # a new generation; x's torch mesh is the old one
        y = ti.all_reduce(x, "sum", axis_name="x")
        assert built == ["all_reduce", "all_reduce"]  # not the first block's plan
        assert ti.describe(y).spec == ((), ())
        np.testing.assert_array_equal(ti.to_numpy(y), host.reshape(4, 1, 4).sum(0))


def test_a_process_group_started_again_is_called_not_the_destroyed_one():
    # One gloo rank in a child process (the process group is process-wide):
    # the same DTensor before and after destroy_process_group + a new
    # init_process_group. Its mesh resolves to the new group; so must the plan.
    script = textwrap.dedent("""
        import json
        import torch, torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Shard
        from parity import torch_impl as ti
        from parity.torch_impl.collectives import eager

        def start():
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)

        def called_group():
            (plan,) = eager._plans.values()
            return plan.group.group

        start()
        mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("x",))
        x = DTensor.from_local(torch.arange(4.0), mesh, [Shard(0)], run_check=False)
        first = ti.all_reduce(x, "sum", axis_name="x")
        old = dist.group.WORLD
        out = {"first_is_world": called_group() is old}
        dist.destroy_process_group()
        start()
        second = ti.all_reduce(x, "sum", axis_name="x")
        out.update(second_is_new_world=called_group() is dist.group.WORLD,
                   second_is_destroyed=called_group() is old,
                   values=second.to_local().tolist())
        dist.destroy_process_group()
        print(json.dumps(out))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"first_is_world": True, "second_is_new_world": True,
                   "second_is_destroyed": False, "values": [0.0, 1.0, 2.0, 3.0]}


def _mesh_and_operands():
    mesh = parity.DeviceMesh((2, 4), ("data", "model"))
    rng = np.random.default_rng(0)
    x = ti.distribute_tensor(rng.standard_normal((8, 16)).astype(np.float32),
                             parity.TensorLayout(("data", "model"), mesh))
    w = ti.distribute_variable(rng.standard_normal((16, 4)).astype(np.float32),
                               parity.TensorLayout(("model", None), mesh))
    return x, w


def test_dtensor_ops_in_a_new_simulate_block_stay_on_its_mesh():
    """DTensor's sharding-propagation cache compares meshes by value: before
    parity emptied it for a new generation, ``nn.Parameter`` (inside
    ``distribute_variable``) and ``detach`` of a DTensor in a second block
    came back on the first block's mesh, whose process group was gone."""
    with ti.simulate(8):
        x, w = _mesh_and_operands()
        ti.to_numpy(x.detach() @ w.detach())
    with ti.simulate(8):
        x, w = _mesh_and_operands()
        assert w.device_mesh is x.device_mesh
        assert x.detach().device_mesh is x.device_mesh


def test_a_step_compiled_in_a_new_simulate_block_after_eager_ops_in_another():
    """What users met: an eager op under ``jax_semantics()`` in one block,
    then ``torch.compile`` of a step in the next failed in dynamo ("Please
    convert all Tensors to FakeTensors", from the old mesh's rank map)."""
    import torch

    def step(x, w):
        y = x @ w
        return (torch.tanh(y) + y * 2.0).sum(0)

    with ti.simulate(8):
        x, w = _mesh_and_operands()
        with ti.jax_semantics():
            eager_out = ti.to_numpy(step(x, w))
    with ti.simulate(8):
        x, w = _mesh_and_operands()
        with ti.jax_semantics():
            torch._dynamo.reset()
            out = torch.compile(step, backend="aot_eager", fullgraph=True, dynamic=False)(x, w)
            out.sum().backward()
            np.testing.assert_allclose(ti.to_numpy(out), eager_out, rtol=1e-6)
            assert w.grad.device_mesh is x.device_mesh
