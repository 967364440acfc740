"""``runtime.simulator.SimulatedRanksMode`` against torch's own
``LocalTensorMode``: the same ops on the same per-rank blocks give the same
blocks, aliasing and random-generator state, and the short per-rank loop
is the one that ran them; ``jax_semantics()``'s mode is not called for the
simulator's per-rank calls."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.distributed._local_tensor import LocalTensor, LocalTensorMode

import parity
from parity import torch_impl as ti
from parity.torch_impl.runtime import simulator
from parity.torch_impl.semantics import mode as semantics_mode

RANKS = 4


def _blocks(seed: int, shape: tuple[int, ...]) -> dict[int, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {r: torch.randn(shape, generator=g) for r in range(RANKS)}


def _program(a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
    """Ops of every kind the short loop takes (binary, matmul, views,
    in-place arithmetic, keyword arguments, a list
    operand, a constant operand) and one it leaves to torch (a random op)."""
    out = [a + b, a @ b.t(), a.view(-1), a.t(), torch.sum(a, dim=1, keepdim=True),
           torch.cat([a, b], dim=0), a * 2.5, torch.where(a > 0, a, b)]
    c = a.clone()
    c.add_(b)
    c.mul_(0.5)
    out += [c, torch.bernoulli(torch.sigmoid(a))]
    return out


def _run(mode_type: type) -> tuple[list[dict], torch.Tensor, list[bool]]:
    torch.manual_seed(7)
    a_blocks, b_blocks = _blocks(0, (4, 3)), _blocks(1, (4, 3))  # plain: made outside the mode
    with mode_type(RANKS):
        a = LocalTensor(a_blocks)
        b = LocalTensor(b_blocks)
        outs = _program(a, b)
        state = torch.get_rng_state()
    blocks = [{r: t._local_tensors[r] for r in range(RANKS)} for t in outs]
    view = outs[2]  # a.view(-1): a view of a (return_and_correct_aliasing)
    view_shares = [view._is_view(), view._base is a]
    return blocks, state, view_shares


def test_the_short_loop_gives_torchs_blocks_aliasing_and_generator_state(monkeypatch):
    runs = []
    each_rank = simulator.SimulatedRanksMode._each_rank

    def counting(self, func, args, kwargs):
        runs.append(func)
        return each_rank(self, func, args, kwargs)

    nested = []  # LocalTensor's own dispatch: it builds a fresh LocalTensorMode per call
    own_dispatch = LocalTensor.__dict__["__torch_dispatch__"].__func__

    def recording(cls, func, types, args=(), kwargs=None):
        nested.append(str(func))
        return own_dispatch(cls, func, types, args, kwargs)

    monkeypatch.setattr(simulator.SimulatedRanksMode, "_each_rank", counting)
    monkeypatch.setattr(LocalTensor, "__torch_dispatch__", classmethod(recording))
    mine, my_state, my_views = _run(simulator.SimulatedRanksMode)
    assert nested == []  # the views' aliasing reads came to the mode
    theirs_nested = len(nested)
    theirs, their_state, their_views = _run(LocalTensorMode)
    assert len(nested) > theirs_nested  # torch's mode: each view's reads took that path
    assert len(mine) == len(theirs)
    for got, want in zip(mine, theirs):
        for r in range(RANKS):
            torch.testing.assert_close(got[r], want[r], rtol=0, atol=0)
    assert torch.equal(my_state, their_state)
    assert my_views == their_views
    names = {str(f) for f in runs}
    assert {"aten.add.Tensor", "aten.mm.default", "aten.view.default", "aten.add_.Tensor",
            "aten.cat.default"} <= names
    assert not any("bernoulli" in n for n in names)


def test_jax_semantics_mode_never_sees_the_per_rank_calls(monkeypatch):
    per_rank = []  # aten ops on plain blocks: the simulator's calls for one rank
    original = semantics_mode._JaxSemanticsMode.__torch_function__

    def recording(self, func, types, args=(), kwargs=None):
        if isinstance(func, torch._ops.OpOverload) and any(type(a) is torch.Tensor for a in args):
            per_rank.append(str(func))
        return original(self, func, types, args, kwargs)

    with ti.simulate(RANKS):
        mesh = parity.DeviceMesh((RANKS,), ("x",))
        w = ti.distribute_tensor(np.ones((8, 4), np.float32), parity.TensorLayout(("x", None), mesh))
        w.requires_grad_(True)
        monkeypatch.setattr(semantics_mode._JaxSemanticsMode, "__torch_function__", recording)
        with ti.jax_semantics():  # the backward runs with the mode pushed again
            (w * w).sum().backward()
        grad = w.grad.full_tensor()
    torch.testing.assert_close(grad, torch.full((8, 4), 2.0))
    # With torch's LocalTensorMode: 44 calls (sym_storage_offset, expand,
    # add, detach, once per rank).
    assert per_rank == []


@pytest.mark.parametrize("op", [torch.ops.aten.bernoulli.default, torch.ops.aten.split.Tensor,
                                torch.ops.aten.dim.default, torch.ops.aten.sym_size.default])
def test_random_and_special_ops_take_torchs_loop(op):
    assert not simulator._plain_op(op)
