"""``runtime.simulator.SimulatedRanksMode`` against torch's own
``LocalTensorMode``: the same ops on the same per-rank blocks give the same
blocks, aliasing, wrappers, metadata reads and random-generator state, and
the short paths are the ones that ran them (no torch fallback, no fresh
mode per collective); ``jax_semantics()``'s mode is not called for the
simulator's per-rank calls."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch.distributed._functional_collectives import all_reduce as funcol_all_reduce
from torch.distributed._local_tensor import LocalTensor, LocalTensorMode

import parity
from parity import torch_impl as ti
from parity.torch_impl.runtime import rank_results, simulator
from parity.torch_impl.runtime.torch_compat import fake_store, funcol_all_gather_single
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
    storage = a.untyped_storage()._cdata  # torch's aliasing fix-up: a view shares it
    view_shares = [view._is_view(), view._base is a, view.untyped_storage()._cdata == storage,
                   outs[0].untyped_storage()._cdata == storage]
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
    assert my_views == their_views == [True, True, True, False]
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


def _uneven(seed: int) -> dict[int, torch.Tensor]:
    """Blocks whose first dim differs between ranks (an uneven shard)."""
    g = torch.Generator().manual_seed(seed)
    return {r: torch.randn((3 + r % 2, 5), generator=g) for r in range(RANKS)}


def _reads(mode_type: type) -> list:
    """Metadata reads, views, plain-tensor operands and result wrappers on
    even and uneven blocks, as each mode answers them."""
    torch.manual_seed(3)
    even, uneven = _blocks(2, (4, 6)), _uneven(4)
    plain = torch.linspace(-1.0, 1.0, 6)
    with mode_type(RANKS):
        a, u = LocalTensor(even), LocalTensor(uneven)
        view = a[:, 1:4]
        seen = [a.size(), a.dim(), a.stride(), view.stride(), view.storage_offset(),
                view.is_contiguous(), a.numel(), u.size(), u.stride(), u.numel(),
                u.t().stride(), u[1:].storage_offset()]
        outs = [a + plain, plain * a, torch.where(a > 0, plain, a), u * 2, u.t(),
                torch.unbind(a, dim=1)[2], plain.clone(), torch.zeros(2, 3), torch.arange(5),
                torch.full((3,), 2.5), torch.empty_strided((2, 3), (1, 2)).fill_(1.0)]
        state = torch.get_rng_state()
    wrappers = [(type(o), o.shape, o.stride(), o.dtype, o.requires_grad,
                 str(torch._C._dispatch_keys(o)),
                 {r: o._local_tensors[r] for r in range(RANKS)} if type(o) is LocalTensor else o)
                for o in outs]
    return [repr(s) for s in seen], wrappers, state


def test_metadata_reads_plain_operands_and_wrappers_match_torchs_mode(monkeypatch):
    fallbacks = []  # ops the simulator hands to torch's own LocalTensorMode path
    torch_path = LocalTensorMode.__torch_dispatch__

    def recording(self, func, types, args=(), kwargs=None):
        if type(self) is simulator.SimulatedRanksMode:
            fallbacks.append(str(func))
        return torch_path(self, func, types, args, kwargs)

    monkeypatch.setattr(LocalTensorMode, "__torch_dispatch__", recording)
    mine = _reads(simulator.SimulatedRanksMode)
    theirs = _reads(LocalTensorMode)
    assert fallbacks == []
    assert mine[0] == theirs[0]  # sizes, strides, offsets: uneven ones as per-rank SymInts
    assert "LocalIntNode" in mine[0][7]  # the uneven blocks' first dim: one size per rank
    for got, want in zip(mine[1], theirs[1]):
        assert got[:6] == want[:6]
        if isinstance(want[6], dict):
            for r in range(RANKS):
                torch.testing.assert_close(got[6][r], want[6][r], rtol=0, atol=0)
        else:
            torch.testing.assert_close(got[6], want[6], rtol=0, atol=0)
    assert torch.equal(mine[2], theirs[2])


def test_wrap_blocks_builds_torchs_wrapper():
    blocks = _blocks(5, (3, 4))
    ranks = frozenset(blocks)
    mine = rank_results.wrap_blocks(dict(blocks), ranks)
    theirs = LocalTensor(dict(blocks))
    assert type(mine) is LocalTensor
    for read in (lambda t: t.shape, lambda t: t.stride(), lambda t: t.dtype,
                 lambda t: t.device, lambda t: t.layout, lambda t: t.requires_grad,
                 lambda t: str(torch._C._dispatch_keys(t)), lambda t: t._ranks,
                 lambda t: t._size, lambda t: type(t._size)):
        assert read(mine) == read(theirs)
    with pytest.raises(RuntimeError):  # the wrapper has no data, as torch's
        mine.untyped_storage().data_ptr()
    # Blocks that differ between ranks (or need torch's checks) are torch's to build.
    assert rank_results.wrap_blocks(_uneven(6), ranks) is None
    conj = {r: torch.ones(2, dtype=torch.complex64).conj() for r in range(RANKS)}
    assert rank_results.wrap_blocks(conj, ranks) is None


def test_functional_collectives_run_without_a_fresh_mode(monkeypatch):
    FakeStore = fake_store()

    def run(mode_type):
        torch.manual_seed(11)
        blocks = _blocks(8, (2, 3))
        dist.init_process_group("fake", rank=0, world_size=RANKS, store=FakeStore())
        try:
            with mode_type(RANKS):
                x = LocalTensor(blocks)
                summed = funcol_all_reduce(x * 1.0, "sum", dist.group.WORLD)
                gathered = funcol_all_gather_single(x, 0, dist.group.WORLD)
                out = [summed.wait() if hasattr(summed, "wait") else summed,
                       gathered.wait() if hasattr(gathered, "wait") else gathered]
                state = torch.get_rng_state()
            return [{r: o._local_tensors[r] for r in range(RANKS)} for o in out], state
        finally:
            dist.destroy_process_group()

    built = []
    init = LocalTensorMode.__init__

    def counting(self, *args, **kwargs):
        built.append(type(self))
        init(self, *args, **kwargs)

    monkeypatch.setattr(LocalTensorMode, "__init__", counting)
    mine, my_state = run(simulator.SimulatedRanksMode)
    assert built == [simulator.SimulatedRanksMode]
    theirs, their_state = run(LocalTensorMode)
    assert built.count(LocalTensorMode) > 1  # torch's mode: a fresh one per collective
    for got, want in zip(mine, theirs):
        for r in range(RANKS):
            torch.testing.assert_close(got[r], want[r], rtol=0, atol=0)
    torch.testing.assert_close(mine[0][0], sum(_blocks(8, (2, 3)).values()))
    assert torch.equal(my_state, their_state)


def test_a_result_tuple_with_a_none_is_combined_as_torch_does():
    # convolution_backward's bias gradient is None when the bias is absent:
    # the short wrapper builder must hand such a result to torch's combiner.
    blocks = _blocks(8, (3, 4))
    ranks = frozenset(blocks)
    out = rank_results.combine({r: (blocks[r], None) for r in range(RANKS)}, ranks)
    theirs = torch.distributed._local_tensor._combine_rank_results(
        {r: (blocks[r], None) for r in range(RANKS)}, None)
    assert out[1] is None and theirs[1] is None
    assert type(out[0]) is LocalTensor
    for r in range(RANKS):
        assert torch.equal(out[0]._local_tensors[r], theirs[0]._local_tensors[r])


def _view_storages(mode_type: type) -> tuple[list[bool], list[dict]]:
    """Whether each view's wrapper shares its input's storage (a view, the
    parts of a list-result view, a transpose, an expand), and its blocks."""
    blocks = _blocks(9, (4, 3))
    with mode_type(RANKS):
        a = LocalTensor(blocks)
        views = [a.view(-1), *torch.unbind(a, dim=0), a.t(), a[:, :1].expand(4, 5)]
    storage = a.untyped_storage()._cdata
    shared = [v.untyped_storage()._cdata == storage and v._base is a for v in views]
    return shared, [{r: v._local_tensors[r] for r in range(RANKS)} for v in views]


def test_a_views_storage_is_shared_as_torchs_fix_up_shares_it(monkeypatch):
    fix_ups = []  # views that took torch's return_and_correct_aliasing
    torch_fix_up = simulator.return_and_correct_aliasing

    def recording(func, *args):
        fix_ups.append(str(func))
        return torch_fix_up(func, *args)

    monkeypatch.setattr(simulator, "return_and_correct_aliasing", recording)
    mine, my_blocks = _view_storages(simulator.SimulatedRanksMode)
    assert fix_ups == []  # every view here: the direct storage swap
    theirs, their_blocks = _view_storages(LocalTensorMode)
    assert mine == theirs == [True] * 7
    for got, want in zip(my_blocks, their_blocks):
        for r in range(RANKS):
            assert torch.equal(got[r], want[r]) and got[r].stride() == want[r].stride()
