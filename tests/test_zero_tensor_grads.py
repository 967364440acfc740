"""``sgn``'s ZeroTensor gradient (issue 25): over simulated ranks it met the
backward of the op that made ``sgn``'s operand and killed the process with
SIGSEGV (pytorch/pytorch#108983: a wrapper subclass runs ops on inner
ZeroTensors with the ZeroTensor key excluded). Under ``jax_semantics()``
``sgn`` of a real tensor runs as ``sign``. Each program runs in its own
process: the failure is a crash, not an exception."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import torch
from subprocess_env import child_env

from parity.torch_impl.semantics.zero_tensor_grads import replacement

_PROGRAM = textwrap.dedent("""
    import numpy as np, torch, parity
    from parity import torch_impl as ti

    value = np.linspace(-1, 1, 256, dtype=np.float32).reshape(16, 16)
    ref = torch.tensor(value, requires_grad=True)  # plain torch, outside the simulated ranks
    BODY_REF
    with ti.simulate(8):
        mesh = parity.DeviceMesh((2, 4), ("data", "model"))
        x = ti.distribute_tensor(value, parity.TensorLayout(("data", None), mesh))
        x.requires_grad_()
        with ti.jax_semantics():
            BODY
        np.testing.assert_array_equal(ti.to_numpy(y), y_ref.detach().numpy())
        assert tuple(x.grad.placements) == tuple(x.placements), x.grad.placements
        np.testing.assert_array_equal(ti.to_numpy(x.grad), ref.grad.numpy())
    print("ok")
""")

CASES = {
    # sgn of an op's result: the ZeroTensor reached mul's backward (SIGSEGV)
    "sgn_of_a_product": "y = torch.sgn(x * 2) + x; y.sum().backward()",
    # the same twice (the second call must not run sgn through the fast path)
    "twice": "y = torch.sgn(x * 2) + x; y.sum().backward(); x.grad = None; "
             "y = torch.sgn(x * 2) + x; y.sum().backward()",
    "method": "y = (x * 2).sgn() * x; y.sum().backward()",
}


def test_sgn_gradient_through_another_op_does_not_crash():
    # one process for every case (starting one costs seconds); a crash in
    # any of them is a negative return code
    program = "\n".join(
        _PROGRAM.replace("BODY_REF", body.replace("x", "ref").replace("y", "y_ref"))
        .replace("BODY", body).replace('print("ok")', f'print("ok {case}")')
        for case, body in CASES.items())
    done = subprocess.run([sys.executable, "-c", program], env=child_env(),
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-3000:])
    assert done.stdout.split() == [w for case in CASES for w in ("ok", case)]


def test_sgn_of_a_real_tensor_runs_as_sign_and_complex_keeps_sgn():
    assert replacement(torch.sgn, (torch.ones(2),), {}) is torch.sign
    assert replacement(torch.Tensor.sgn_, (torch.ones(2),), {}) is torch.Tensor.sign_
    assert replacement(torch.sgn, (), {"input": torch.ones(2)}) is torch.sign
    assert replacement(torch.sgn, (torch.ones(2, dtype=torch.complex64),), {}) is torch.sgn
    assert replacement(torch.add, (torch.ones(2),), {}) is torch.add
