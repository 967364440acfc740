"""The same semantics on CUDA (marked ``gpu``; skipped without a CUDA device).

Simulated ranks keep every block on one GPU (``simulate(8, device="cuda")``);
the reference is JAX on 8 CPU devices. Real ranks: one process per GPU with
NCCL under torchrun.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import MESHES
from torchrun import run_torchrun

import parity
from parity import jax_ref
from parity.layout_space import all_specs

jax_ref.simulate(8)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from parity import torch_impl as ti  # noqa: E402
from test_random_invariance import LAYOUTS as RANDOM_LAYOUTS  # noqa: E402
from test_random_invariance import OPS as RANDOM_OPS  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible"),
]
L = parity.TensorLayout


def host(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def reference(mesh_id, program):
    with parity.use_backend("jax"):
        return program(jax_ref, parity.DeviceMesh(*MESHES[mesh_id]))


def on_gpu(mesh_id, program):
    with ti.simulate(8, device="cuda"):
        return program(ti, parity.DeviceMesh(*MESHES[mesh_id]))


@pytest.mark.parametrize("mesh_id", ["8", "2x4", "2x2x2"])
def test_every_rank2_layout_on_cuda_has_jax_placement_and_values(mesh_id):
    data = host((8, 16))
    specs = list(all_specs(MESHES[mesh_id][1], 2))

    def program(backend, mesh):
        out = []
        for spec in specs:
            x = backend.distribute_tensor(data, L.from_spec(spec, mesh))
            if backend is ti:
                assert all(ti.local_block(x, r).is_cuda for r in range(8)), spec
            out.append((backend.describe(x), backend.to_numpy(x)))
        return out

    for spec, (ref_p, ref_v), (gpu_p, gpu_v) in zip(
        specs, reference(mesh_id, program), on_gpu(mesh_id, program)
    ):
        assert gpu_p == ref_p, f"{spec}: {ref_p.differences(gpu_p)}"
        np.testing.assert_array_equal(gpu_v, ref_v)


@pytest.mark.parametrize("axis_name", ["data", "model"])
def test_collectives_on_cuda_match_jax(axis_name):
    data = host((8, 16))

    def program(backend, mesh):
        x = backend.distribute_tensor(data, L(("data", "model"), mesh))
        outs = [backend.all_reduce(x, op, axis_name=axis_name) for op in ("sum", "mean", "max", "min")]
        outs += [backend.all_gather(x, 1, axis_name), backend.reduce_scatter(x, 0, axis_name)]
        return [(backend.describe(y), backend.to_numpy(y)) for y in outs]

    for (ref_p, ref_v), (gpu_p, gpu_v) in zip(reference("2x4", program), on_gpu("2x4", program)):
        assert gpu_p == ref_p, ref_p.differences(gpu_p)
        np.testing.assert_allclose(gpu_v, ref_v, rtol=1e-6, atol=1e-6)


def test_mlp_grads_on_cuda_have_their_weights_placement_and_jax_values():
    layouts = [("data", None), (None, "model"), ("model",), ("model", None), (None,)]
    arrays = [host((8, 16)), host((16, 32), 1), host((32,), 2), host((32, 8), 3), host((8,), 4)]

    def jloss(x, w1, b1, w2, b2):
        return jnp.mean((jax.nn.gelu(x @ w1 + b1, approximate=False) @ w2 + b2) ** 2)

    values = jax.grad(jloss, argnums=tuple(range(5)))(*arrays)
    placements = reference("2x4", lambda b, mesh: [
        b.describe(b.distribute_tensor(a, L(s, mesh))) for a, s in zip(arrays, layouts)])

    def program(backend, mesh):
        params = [backend.distribute_variable(a, L(s, mesh)) for a, s in zip(arrays, layouts)]
        x, w1, b1, w2, b2 = params
        with backend.jax_semantics():
            ((torch.nn.functional.gelu(x @ w1 + b1) @ w2 + b2) ** 2).mean().backward()
        return [(backend.describe(p.grad), backend.to_numpy(p.grad)) for p in params]

    tol = 1e-2 if torch.backends.cuda.matmul.allow_tf32 else 1e-4
    for want_p, want_v, (got_p, got_v) in zip(placements, values, on_gpu("2x4", program)):
        assert got_p == want_p and got_p.pending == (), want_p.differences(got_p)
        np.testing.assert_allclose(got_v, np.asarray(want_v), rtol=tol, atol=tol)


def test_conformance_report_made_on_cuda_matches_the_cpu_reference(tmp_path):
    ops = ["add", "matmul", "softmax", "sum", "all_reduce", "reduce_scatter", "distribute_tensor"]
    select = [a for op in ops for a in ("--op", op)] + ["--mesh", "2x4"]
    cli = [sys.executable, "-m", "conformance.cli"]
    for backend, extra in (("jax", []), ("torch", ["--device", "cuda"])):
        proc = subprocess.run([*cli, "run", "--backend", backend, *extra, *select,
                               "--out", str(tmp_path / f"{backend}.json")],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "torch.json").read_text())
    assert report["device"] == "cuda" and "tf32" in report
    assert len(report["cases"]) > 50
    proc = subprocess.run([*cli, "compare", str(tmp_path / "jax.json"), str(tmp_path / "torch.json"),
                           "--json", str(tmp_path / "c.json")], capture_output=True, text=True)
    summary = json.loads((tmp_path / "c.json").read_text())["summary"]
    assert proc.returncode == 0, summary


@pytest.mark.parametrize("random", ["invariant", "counter"])
@pytest.mark.parametrize("layout", RANDOM_LAYOUTS, ids=lambda c: f"{c[0]}-{c[2]}")
def test_random_ops_on_cuda_give_the_unsharded_cuda_programs_values(layout, random):
    # issue 25: every random op draws on its operand's device from that
    # device's generator; the reference is the same program on plain CUDA
    # tensors after the same torch.manual_seed (under "counter": in the same
    # scope, where plain tensors draw from threefry too)
    shape, names, spec = layout
    value = host((8, 8, 4, 4))
    reference_scope = (lambda: ti.jax_semantics(random="counter")) if random == "counter" else (
        contextlib.nullcontext)
    with ti.simulate(8, device="cuda"):
        mesh = parity.DeviceMesh(shape, names)
        for name, op in RANDOM_OPS.items():
            torch.manual_seed(7)
            with reference_scope():
                expected = op(torch.from_numpy(value).cuda()).cpu().numpy()
            x = ti.distribute_tensor(value, L(spec, mesh))
            torch.manual_seed(7)
            with ti.jax_semantics(random=random):
                out = op(x)
            assert all(ti.local_block(out, r).is_cuda for r in range(8)), name
            np.testing.assert_array_equal(ti.to_numpy(out), expected, err_msg=name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16],
                         ids=lambda d: str(d).removeprefix("torch."))
def test_fused_cuda_dropout_values_and_gradient_on_cuda(dtype):
    # on CUDA F.dropout is torch's fused kernel (its own mask; half types
    # computed in float32 and rounded once): values and the gradient's mask
    # equal the unsharded CUDA program's
    value = host((8, 8, 4, 4))
    plain = torch.from_numpy(value).to("cuda", dtype).requires_grad_()
    torch.manual_seed(3)
    ref = torch.nn.functional.dropout(plain, 0.3)
    (ref * ref).sum().backward()
    with ti.simulate(8, device="cuda"):
        mesh = parity.DeviceMesh((2, 4), ("data", "model"))
        x = ti.distribute_tensor(plain.detach().cpu(), L(("data", "model", None, None), mesh))
        x.requires_grad_()
        torch.manual_seed(3)
        with ti.jax_semantics():
            out = torch.nn.functional.dropout(x, 0.3)
            (out * out).sum().backward()
        assert tuple(out.placements) == tuple(x.placements)
        got = np.asarray(ti.to_numpy(out), np.float32)
        grad = np.asarray(ti.to_numpy(x.grad), np.float32)
    np.testing.assert_array_equal(got, ref.detach().float().cpu().numpy())
    np.testing.assert_array_equal(grad, plain.grad.float().cpu().numpy())


@pytest.mark.multiprocess
@pytest.mark.skipif(torch.cuda.device_count() < 2,
                    reason=f"NCCL between ranks needs 2 or more GPUs (one rank per GPU); "
                           f"this machine has {torch.cuda.device_count()}")
def test_nccl_ranks_one_per_gpu_distribute_and_reduce():
    output = run_torchrun("nccl_worker.py", nproc=torch.cuda.device_count())
    assert "nccl: ok" in output
