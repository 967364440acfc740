"""Run under torchrun with 4 gloo ranks: random ops under ``jax_semantics()``
draw the unsharded program's values (issue 25). Each rank seeds torch,
draws the plain op on the global tensor (the reference: torch's own
values), seeds again, runs the op on a DTensor laid out on the (2, 2) mesh,
gathers the result and compares bit for bit; the same under
``random="counter"`` against the plain op in the same scope; then
dropout's gradient. Exits
non-zero on the first mismatch, else prints ``rank N: ok``.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import parity
from parity import torch_impl as ti

OPS = {
    "dropout": lambda x: F.dropout(x, 0.3),
    "dropout2d": lambda x: F.dropout2d(x, 0.5),
    "rand_like": torch.rand_like,
    "randn_like": torch.randn_like,
    "bernoulli": lambda x: torch.bernoulli(torch.sigmoid(x)),
    "normal_": lambda x: x.clone().normal_(),
    "multinomial": lambda x: torch.multinomial(torch.sigmoid(x).reshape(64, 16), 3),
    "attention_dropout": lambda x: F.scaled_dot_product_attention(x, x, x, dropout_p=0.5),
}


def main() -> None:
    ti.initialize()
    rank = ti.process_id()
    mesh = parity.DeviceMesh((2, 2), ("data", "model"))
    value = np.random.default_rng(0).standard_normal((8, 8, 4, 4)).astype(np.float32)
    for spec in [("data", "model", None, None), (("model", "data"), None, None, None),
                 (None, None, "data", "model")]:
        for name, op in OPS.items():
            torch.manual_seed(11)
            expected = op(torch.from_numpy(value)).numpy()
            x = ti.distribute_tensor(value, parity.TensorLayout(spec, mesh))
            torch.manual_seed(11)
            with ti.jax_semantics():
                got = ti.to_numpy(op(x))
            if name == "attention_dropout":
                np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, err_msg=name)
            else:
                np.testing.assert_array_equal(got, expected, err_msg=f"{name} {spec}")
    for spec in [("data", "model", None, None), (None, None, "data", "model")]:
        for name, op in OPS.items():  # random="counter": the plain program in the same scope
            torch.manual_seed(13)
            with ti.jax_semantics(random="counter"):
                expected = op(torch.from_numpy(value)).numpy()
            x = ti.distribute_tensor(value, parity.TensorLayout(spec, mesh))
            torch.manual_seed(13)
            with ti.jax_semantics(random="counter"):
                got = ti.to_numpy(op(x))
            if name == "attention_dropout":
                np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, err_msg=name)
            else:
                np.testing.assert_array_equal(got, expected, err_msg=f"counter {name} {spec}")
    ref = torch.tensor(value, requires_grad=True)
    torch.manual_seed(5)
    (F.dropout(ref, 0.5) ** 2).sum().backward()
    x = ti.distribute_tensor(value, parity.TensorLayout(("data", "model", None, None), mesh))
    x.requires_grad_()
    torch.manual_seed(5)
    with ti.jax_semantics():
        (F.dropout(x, 0.5) ** 2).sum().backward()
    np.testing.assert_array_equal(ti.to_numpy(x.grad), ref.grad.numpy())
    print(f"rank {rank}: ok", flush=True)


if __name__ == "__main__":
    main()
