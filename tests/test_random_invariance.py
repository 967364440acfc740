"""Random ops under ``jax_semantics()`` give the unsharded program's values
(issue 25): after the same ``torch.manual_seed``, a random op on a DTensor
laid out any way on the (2, 4) and (2, 2, 2) meshes equals -- bit for bit --
the same op on the plain global tensor (torch's own values, nothing written
here), and dropout's gradient uses the same mask. ``random="per_rank"``
(the opt-out) keeps torch's per-block draws, which differ.

``random="counter"`` (per-block threefry): every op above, sharded, equals
the same op on the plain tensor inside the same scope (the counter-covered
ops draw from threefry on both sides, the rest globally), a rank hashes
only its block's indices, and the values are not torch's own.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import parity
from parity import torch_impl as ti

L = parity.TensorLayout
MESHES = [  # (mesh shape, axis names, layouts of a 4-d [8, 8, 4, 4] tensor)
    ((2, 4), ("data", "model"), [("data", "model", None, None), (None, None, "data", "model"),
                                 (("data", "model"), None, None, None)]),
    ((2, 2, 2), ("a", "b", "c"), [("a", ("b", "c"), None, None)]),
]
LAYOUTS = [(shape, names, spec) for shape, names, specs in MESHES for spec in specs]
OPS = {
    "dropout": lambda x: F.dropout(x, 0.3),
    "nn.Dropout": lambda x: torch.nn.Dropout(0.5)(x),
    "dropout2d": lambda x: F.dropout2d(x, 0.5),
    "dropout2d_of_3d": lambda x: F.dropout2d(x[:, :, 0], 0.5),  # batched (N, C, L)
    "dropout3d_unbatched": lambda x: F.dropout3d(x, 0.5),  # (C, D, H, W)
    "alpha_dropout": lambda x: F.alpha_dropout(x, 0.5, True),
    "rrelu_inplace": lambda x: F.rrelu(x.clone(), training=True, inplace=True),
    # factories (no operand to shard): plain draws on the operand's device
    # that meet the DTensor
    "rand": lambda x: x + torch.rand(tuple(x.shape), device=x.device),
    "randn": lambda x: x * torch.randn(tuple(x.shape), device=x.device),
    "randint": lambda x: x + torch.randint(0, 5, tuple(x.shape), device=x.device),
    "rand_like": torch.rand_like,
    "randn_like": torch.randn_like,
    "randint_like": lambda x: torch.randint_like(x, 10),
    "bernoulli": lambda x: torch.bernoulli(torch.sigmoid(x)),
    "normal_": lambda x: x.clone().normal_(),
    "uniform_": lambda x: x.clone().uniform_(-1, 1),
    "bernoulli_": lambda x: x.clone().bernoulli_(0.25),
    "multinomial": lambda x: torch.multinomial(torch.sigmoid(x).reshape(64, 16), 3),
    "init.normal_": lambda x: torch.nn.init.normal_(x.clone()),
    "init.kaiming_uniform_": lambda x: torch.nn.init.kaiming_uniform_(x.clone()),
    "init.trunc_normal_": lambda x: torch.nn.init.trunc_normal_(x.clone()),
    "init.xavier_normal_": lambda x: torch.nn.init.xavier_normal_(x.clone()),
    # (an output size of 3 or more: with 1 or 2 the regions are not random)
    "fractional_max_pool2d": lambda x: F.fractional_max_pool2d(
        x, 1, output_size=3, return_indices=True)[0],
    "fractional_max_pool3d": lambda x: F.fractional_max_pool3d(
        torch.stack([x, -x, 2 * x], 2), 1, output_size=(2, 3, 3)),  # batched
    "fractional_max_pool3d_unbatched": lambda x: F.fractional_max_pool3d(
        x, 1, output_size=(3, 3, 3)),
}


def _value(shape=(8, 8, 4, 4), seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda c: f"{c[0]}-{c[2]}")
def test_every_random_op_gives_the_unsharded_values(sim8, layout):
    shape, names, spec = layout
    value = _value()
    mesh = parity.DeviceMesh(shape, names)
    for name, op in OPS.items():
        torch.manual_seed(7)
        expected = op(torch.from_numpy(value)).numpy()
        x = ti.distribute_tensor(value, L(spec, mesh))
        torch.manual_seed(7)
        with ti.jax_semantics():
            out = op(x)
        np.testing.assert_array_equal(ti.to_numpy(out), expected, err_msg=name)


@pytest.mark.parametrize("dropout", [F.dropout, F.dropout2d], ids=["dropout", "dropout2d"])
@pytest.mark.parametrize("layout", [LAYOUTS[1], LAYOUTS[3]], ids=["2x4", "2x2x2"])
def test_dropout_gradient_uses_the_same_mask(sim8, layout, dropout):
    shape, names, spec = layout
    value = _value()
    ref = torch.tensor(value, requires_grad=True)
    torch.manual_seed(3)
    y = dropout(ref, 0.5)
    (y * y).sum().backward()
    x = ti.distribute_tensor(value, L(spec, parity.DeviceMesh(shape, names))).requires_grad_()
    torch.manual_seed(3)
    with ti.jax_semantics():
        out = dropout(x, 0.5)
        (out * out).sum().backward()
    np.testing.assert_array_equal(ti.to_numpy(x.grad), ref.grad.numpy())
    assert tuple(x.grad.placements) == tuple(x.placements)
    assert tuple(out.placements) == tuple(x.placements)  # the input is never gathered


@pytest.mark.parametrize("mesh_shape, names, spec", [
    ((2, 4), ("data", "model"), ("data", None, None, "model")),
    ((2, 4), ("data", "model"), ("data", "model", None, None)),
    ((2, 2, 2), ("a", "b", "c"), ("a", ("b", "c"), None, None)),
], ids=["2x4-heads-replicated", "2x4", "2x2x2"])
def test_attention_dropout_values_and_gradient(sim8, mesh_shape, names, spec):
    qkv = [_value((2, 4, 8, 8), seed) for seed in range(3)]
    refs = [torch.tensor(a, requires_grad=True) for a in qkv]
    torch.manual_seed(1)
    ref = F.scaled_dot_product_attention(*refs, dropout_p=0.5)
    ref.sum().backward()
    mesh = parity.DeviceMesh(mesh_shape, names)
    xs = [ti.distribute_tensor(a, L(spec, mesh)).requires_grad_() for a in qkv]
    torch.manual_seed(1)
    with ti.jax_semantics():
        out = F.scaled_dot_product_attention(*xs, dropout_p=0.5)
        out.sum().backward()
    np.testing.assert_allclose(ti.to_numpy(out), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    for x, r in zip(xs, refs):
        np.testing.assert_allclose(ti.to_numpy(x.grad), r.grad.numpy(), rtol=1e-4, atol=1e-5)
        assert tuple(x.grad.placements) == tuple(x.placements)


def test_per_rank_opt_out_draws_per_block(sim8):
    value = _value()
    torch.manual_seed(2)
    expected = F.dropout(torch.from_numpy(value), 0.5).numpy()
    x = ti.distribute_tensor(value, L(("data", "model", None, None),
                                      parity.DeviceMesh((2, 4), ("data", "model"))))
    torch.manual_seed(2)
    with ti.jax_semantics(random="per_rank"):
        out = F.dropout(x, 0.5)
    assert not np.array_equal(ti.to_numpy(out), expected)


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda c: f"{c[0]}-{c[2]}")
def test_counter_mode_gives_the_unsharded_programs_values(sim8, layout):
    shape, names, spec = layout
    value = _value()
    mesh = parity.DeviceMesh(shape, names)
    for name, op in OPS.items():
        torch.manual_seed(7)
        with ti.jax_semantics(random="counter"):
            expected = op(torch.from_numpy(value)).numpy()
        x = ti.distribute_tensor(value, L(spec, mesh))
        torch.manual_seed(7)
        with ti.jax_semantics(random="counter"):
            out = op(x)
        np.testing.assert_array_equal(ti.to_numpy(out), expected, err_msg=name)


def test_counter_mode_hashes_only_the_block_and_is_not_torchs(sim8, monkeypatch):
    from parity.torch_impl.semantics import threefry

    sizes = []
    original = threefry.threefry2x32

    def recording(key, x0, x1):
        sizes.append(x0.numel())
        return original(key, x0, x1)

    monkeypatch.setattr(threefry, "threefry2x32", recording)
    value = _value()
    x = ti.distribute_tensor(value, L((("data", "model"), None, None, None),
                                      parity.DeviceMesh((2, 4), ("data", "model"))))
    x.requires_grad_()
    torch.manual_seed(5)
    with ti.jax_semantics(random="counter"):
        out = F.dropout(x, 0.5)
        again = F.dropout(x, 0.5)
        (out * out).sum().backward()
    assert sizes and max(sizes) == value.size // 8, sizes  # each rank: its block only
    torch.manual_seed(5)
    plain = F.dropout(torch.from_numpy(value), 0.5).numpy()
    assert not np.array_equal(ti.to_numpy(out), plain)  # threefry's values, not MT19937's
    assert not np.array_equal(ti.to_numpy(out), ti.to_numpy(again))  # a new key per call
    mask = ti.to_numpy(out) != 0
    np.testing.assert_array_equal(ti.to_numpy(x.grad), np.where(mask, 8 * value, 0))
    assert tuple(x.grad.placements) == tuple(x.placements)


def test_a_per_rank_call_does_not_decide_later_calls(sim8):
    # the mode's fast path remembered the per-rank call's signature as clean,
    # and the next invariant call with it skipped the random ops
    value = _value()
    x = ti.distribute_tensor(value, L(("data", "model", None, None),
                                      parity.DeviceMesh((2, 4), ("data", "model"))))
    with ti.jax_semantics(random="per_rank"):
        torch.nn.Dropout(0.5)(x)
    torch.manual_seed(4)
    expected = torch.nn.Dropout(0.5)(torch.from_numpy(value)).numpy()
    torch.manual_seed(4)
    with ti.jax_semantics():
        out = torch.nn.Dropout(0.5)(x)
    np.testing.assert_array_equal(ti.to_numpy(out), expected)


_FACTORIES = frozenset({torch.empty, torch.empty_strided, torch.zeros, torch.ones, torch.full,
                        torch.arange, torch.rand, torch.randn, torch.randint, torch.tensor,
                        torch.randperm})


class _FactoryDevices(torch.overrides.TorchFunctionMode):
    """Records each tensor factory call and the ``device`` it names."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _FACTORIES:
            self.calls.append((func.__name__, kwargs.get("device")))
        return func(*args, **kwargs)


@pytest.mark.parametrize("random", ["invariant", "counter"])
def test_every_random_op_draws_on_its_operands_device(sim8, random):
    # On CUDA each device has its own generator: a buffer made without
    # device= lands on the CPU and draws the CPU generator's values, not the
    # unsharded CUDA program's (tests/test_gpu.py checks the values on a GPU).
    # Here: every tensor the random ops make names its device.
    shape, names, spec = LAYOUTS[0]
    x = ti.distribute_tensor(_value(), L(spec, parity.DeviceMesh(shape, names)))
    made = {}
    for name, op in OPS.items():
        record = _FactoryDevices()  # below the semantics mode: sees what it makes
        torch.manual_seed(0)
        with record, ti.jax_semantics(random=random):
            op(x)
        made[name] = len(record.calls)
        unnamed = [factory for factory, device in record.calls if device is None]
        assert not unnamed, f"{name}: {unnamed} made without device= (lands on the CPU)"
        elsewhere = [(f, d) for f, d in record.calls
                     if torch.device(d) not in (x.device, torch.device("meta"))]  # meta: shapes
        assert not elsewhere, f"{name}: {elsewhere} made on another device than {x.device}"
    assert all(made[name] for name in ("dropout", "rand_like", "normal_", "randn")), made


@pytest.mark.parametrize("layout", [LAYOUTS[0], LAYOUTS[3]], ids=["2x4", "2x2x2"])
def test_fused_dropout_branch_gives_native_dropouts_values(sim8, monkeypatch, layout):
    # On CUDA torch's F.dropout is the fused native_dropout kernel, whose mask
    # is not bernoulli_'s. Its branch, run here on the CPU's native_dropout:
    # the sharded result equals native_dropout of the whole tensor.
    from parity.torch_impl.semantics import random as random_ops

    monkeypatch.setattr(random_ops, "_FUSED_DROPOUT_DEVICES", frozenset({"cpu"}))
    taken = []
    fused_noise = random_ops._fused_noise
    monkeypatch.setattr(random_ops, "_fused_noise", lambda x, p: taken.append(p) or fused_noise(x, p))
    shape, names, spec = layout
    value = _value()
    for p in (0.3, 0.5):
        torch.manual_seed(6)
        expected = torch.native_dropout(torch.from_numpy(value), p, True)[0].numpy()
        x = ti.distribute_tensor(value, L(spec, parity.DeviceMesh(shape, names)))
        torch.manual_seed(6)
        with ti.jax_semantics():
            out = F.dropout(x, p)
            F.dropout(x, p, inplace=True)  # torch's dropout_: bernoulli_ on every device
        np.testing.assert_array_equal(ti.to_numpy(out), expected)
        assert tuple(out.placements) == tuple(x.placements)
    assert taken == [0.3, 0.5]


def test_unknown_random_option_is_a_parity_error():
    with pytest.raises(parity.ParityError, match="random='threefry'"):
        ti.jax_semantics(random="threefry")
