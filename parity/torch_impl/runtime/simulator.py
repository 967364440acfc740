"""What ``simulate(n)`` runs its ranks on: torch's ``LocalTensorMode`` (each
op run once per simulated rank, on that rank's plain block), with two
speed-ups that leave every rank's block computed as torch computes it.

1. Torch-function handling is off while the simulator runs an op. The
   per-rank calls are plain-tensor ops made by the simulator's own Python;
   a ``TorchFunctionMode`` left on the stack (``jax_semantics()``'s, pushed
   again for a backward or around a Keras variable update) was called for
   each of them and handed each back untouched. Measured on the Keras MLP
   step of ``benchmarks.keras_step`` (mesh 2 x 4): the mode's calls went
   from 3,656 to 793 per step.
2. ``_each_rank``: a common op -- an ``aten`` op that draws no
   random numbers, whose operands are ``LocalTensor``s of this mode's ranks,
   plain tensors (each rank gets the same one, as in torch's loop) and
   constants, in at most lists and tuples -- runs through a shorter
   per-rank loop than torch's ``_for_each_rank_run_func``: no pytree
   flatten and unflatten per rank, and no save and restore of each rank's
   random-generator state around an op that never reads it. The op, the
   blocks it gets and the way the results are combined (and aliased) are
   torch's own; the generator is left in the state torch leaves it (the
   last rank's, whose state such an op does not change). Anything else
   (random ops, collectives, ``SymInt`` operands, a mode that is disabled
   or not the enabled one) takes torch's own path; an operand of another
   tensor subclass (a ``DTensor``, whose own dispatch runs next) gets
   torch's first answer, ``NotImplemented``, without torch's pytree walk.
   A factory (``zeros``, ``arange``, ``empty_strided``: constants only)
   takes the same loop. Each rank's call goes to the op's C entry
   (``OpOverload._op``, what ``OpOverload.__call__`` calls), a list operand
   is split into per-rank rows in one pass, and on a CPU-only run the
   generator is restored with ``torch.set_rng_state`` (torch's
   ``_set_rng_state`` with no accelerator states to set).
3. A view's aliasing fix-up runs with this mode pushed back on the stack:
   its reads of the wrappers' sizes, strides and offsets come to this mode
   instead of each building, entering and leaving a fresh
   ``LocalTensorMode`` (about 150 us a read). For a view whose inputs and
   results are ``LocalTensor``s the fix-up is the storage swap torch's
   ``_correct_storage_aliasing`` makes (each result takes the storage of
   the input it views); an in-place view, a result that is an input, or
   any other operand type takes torch's ``return_and_correct_aliasing``.
4. Reads of a wrapper's metadata (``sym_size``, ``dim``, ``sym_stride``,
   ``sym_storage_offset``, ``sym_numel``, ``numel``, ``is_contiguous``;
   about half the ops a Keras step dispatches, most of them from the
   aliasing fix-up above) are answered first, as torch answers them --
   ``sym_size`` and ``dim`` from the wrapper's ``_size``, the others from
   each rank's block, combined by torch's combine -- without an op call per
   rank (4 us each through ``OpOverload``) and the aliasing fix-up of their
   int results.
5. Results are combined by ``rank_results.combine``: torch's wrapper,
   built directly where every rank's block is alike.
6. A functional collective torch runs as its composite kernel
   (``all_reduce``, ``wait_tensor``, ...) runs with this mode pushed back
   on the stack, where torch builds, enters and leaves a fresh
   ``LocalTensorMode`` per call (cloning every rank's generator state and
   patching the device mesh and random functions twice). The process
   generator is left as torch's fresh mode leaves it (as it was on entry).
   An op on plain tensors only (no ``LocalTensor``) is called as torch
   calls it, without torch's pytree walk.
"""

from __future__ import annotations

from typing import Any

import torch

from parity.torch_impl.runtime.rank_results import combine
from parity.torch_impl.runtime.torch_compat import (
    FakeTensor,
    LocalTensor,
    LocalTensorMode,
    OpOverload,
    alias_info,
    combine_rank_results,
    composite_explicit_autograd,
    disable_torch_function,
    enabled_local_tensor_mode,
    get_rng_state,
    is_inplace_op,
    pop_dispatch_mode,
    push_dispatch_mode,
    return_and_correct_aliasing,
    set_rng_state,
    unsafe_set_storage,
)

# Operand types handed to every rank unchanged (what torch's per-rank map
# leaves alone too).
_CONSTANTS = frozenset({int, float, bool, complex, str, type(None), torch.dtype, torch.device,
                        torch.layout, torch.memory_format})
# Ops torch's per-rank loop treats specially (a default result, an empty-tensor case).
_SPECIAL = frozenset({torch.ops.aten.split.Tensor,
                      getattr(getattr(torch.ops.aten, "hash_tensor", None), "default", None)})
_SPECIAL_PACKETS = frozenset({torch.ops.aten.dim, torch.ops.aten.sym_size})
# Whether this torch has every helper ``_each_rank`` ends with.
_SHORT_LOOP = None not in (combine_rank_results, enabled_local_tensor_mode, is_inplace_op,
                           set_rng_state, get_rng_state)
_SEEDED = torch.Tag.nondeterministic_seeded
_INPLACE_VIEW = torch.Tag.inplace_view


class SimulatedRanksMode(LocalTensorMode):
    """``LocalTensorMode`` with the speed-ups of the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sorted_ranks = tuple(sorted(self.ranks))
        self._plain_ops: dict[Any, bool] = {}  # op -> whether _each_rank may run it
        # op -> whether its result needs torch's aliasing fix-up (a view, an
        # in-place view, a result that is an input)
        self._aliasing: dict[Any, bool] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        with disable_torch_function():
            if kwargs is None:
                kwargs = {}
            if _SHORT_LOOP and type(func) is OpOverload:
                read = _METADATA.get(func)
                if (read is not None and len(args) == 1 and not kwargs
                        and type(args[0]) is LocalTensor and not self._disable
                        and self._owns((args[0],))):
                    return read(self, args[0])
                found: list = []
                seen = _CONSTANT
                for a in args:
                    seen = max(seen, _operand(a, found))
                for a in kwargs.values():
                    seen = max(seen, _operand(a, found))
                if seen == _FOREIGN:  # torch's first answer: another subclass handles it
                    return NotImplemented
                if not found:
                    # torch's answer where no operand is a LocalTensor: the op
                    # itself, on plain tensors or with the mode disabled (a
                    # device-mesh op of an enabled mode is torch's); a factory
                    # (constants only) runs on every rank
                    if self._disable or (seen == _PLAIN and func.namespace != "device_mesh"):
                        return func(*args, **kwargs)
                    if seen == _CONSTANT and self._owns(found) and self._runs_each_rank(func):
                        return self._each_rank(func, args, kwargs)
                elif seen <= _PLAIN and not self._disable and self._owns(found):
                    if self._runs_each_rank(func):
                        return self._each_rank(func, args, kwargs)
                    if (seen == _CONSTANT and func.namespace in _COMPOSITE_COLLECTIVES
                            and func not in _OWN_COLLECTIVES):
                        return self._composite_collective(func, args, kwargs)
            return super().__torch_dispatch__(func, types, args, kwargs)

    def _owns(self, found: list) -> bool:
        """Whether the ``LocalTensor`` operands are this mode's ranks' and
        this mode is the enabled one, with a generator state for each rank."""
        ranks = self.ranks
        for t in found:
            if t._ranks is not ranks and t._ranks != ranks:
                return False
        # (``__enter__`` stores every rank's state, torch's loop replaces them)
        return (enabled_local_tensor_mode() is self
                and len(self._per_rank_rng_states) == len(self.ranks))

    def _runs_each_rank(self, func) -> bool:
        plain = self._plain_ops.get(func)
        if plain is None:
            plain = self._plain_ops[func] = _plain_op(func)
            self._aliasing[func] = _aliasing(func) if plain else None
        return plain

    def _read_each_rank(self, read, tensor: LocalTensor) -> Any:
        """A metadata read (an int, a list of ints, a bool) of each rank's
        block, combined, with the generator left as torch's loop leaves it."""
        blocks = tensor._local_tensors
        values = [read(blocks[rank]) for rank in self._sorted_ranks]
        _restore_generator(self._per_rank_rng_states[self._sorted_ranks[-1]])
        first = values[0]
        if values.count(first) == len(values):
            return first  # torch's combine of equal ints (lists of ints): the value
        return combine_rank_results(dict(zip(self._sorted_ranks, values)), None)

    def _composite_collective(self, func, args: tuple, kwargs: dict) -> Any:
        """``func``'s composite kernel run with this mode on the stack (torch
        runs it under a fresh ``LocalTensorMode`` whose generator states are
        copies of the process's: the process generator ends as it began)."""
        entry_state = get_rng_state()
        push_dispatch_mode(self)
        try:
            return func._op_dk(composite_explicit_autograd, *args, **kwargs)
        finally:
            pop_dispatch_mode()
            set_rng_state(*entry_state)

    def _each_rank(self, func, args: tuple, kwargs: dict) -> Any:
        ranks = self._sorted_ranks
        op = func._op  # what ``OpOverload.__call__`` calls, without its Python frame
        # Each operand as every rank sees it (one column per operand), then
        # each rank's operands (one row per rank).
        rows = zip(*[_column(a, ranks) for a in args]) if args else [()] * len(ranks)
        results = {}
        rank = None
        try:
            if kwargs:
                for rank, rank_args in zip(ranks, rows):
                    results[rank] = op(*rank_args, **{k: _at(v, rank) for k, v in kwargs.items()})
            else:
                for rank, rank_args in zip(ranks, rows):
                    results[rank] = op(*rank_args)
        finally:
            # torch sets each rank's generator state before its call and leaves
            # the last one entered; such an op never changes it.
            if rank is not None:
                _restore_generator(self._per_rank_rng_states[rank])
        if is_inplace_op(func):
            out = args[0]
            if _INPLACE_VIEW in func.tags:
                out._sync_meta()
            return out
        out = combine(results, self.ranks)
        aliasing = self._aliasing[func]
        if aliasing is None:
            return out  # what torch's fix-up returns for an op that aliases nothing
        # Speed: a view's aliasing fix-up reads the wrappers' sizes, strides and
        # offsets through dispatch. With this mode off the stack (as it is inside
        # its own dispatch) each read made, entered and left a fresh
        # LocalTensorMode (about 150 us: 96 reads, 14 ms of an 80 ms Keras MLP
        # step); with the mode back on the stack the reads come here, and run the
        # same per-rank reads.
        push_dispatch_mode(self)
        try:
            if aliasing is _FIX_UP or not _share_storages(aliasing, args, out):
                return return_and_correct_aliasing(func, args, kwargs, out)
            return out
        finally:
            pop_dispatch_mode()


def _restore_generator(states: tuple) -> None:
    """torch's ``_set_rng_state(cpu_state, accelerator_states)``: the CPU
    generator's state, then each accelerator's (none on a CPU-only run,
    where torch's call only asks whether an accelerator is available)."""
    cpu_state, accelerator_states = states
    if accelerator_states:
        set_rng_state(cpu_state, accelerator_states)
    else:
        torch.set_rng_state(cpu_state)


def _plain_op(func: Any) -> bool:
    """Whether ``func`` may take ``_each_rank``: an ``aten`` op that draws no
    random numbers and that torch's per-rank loop does not single out."""
    return (type(func) is OpOverload and func.namespace == "aten" and _SEEDED not in func.tags
            and func not in _SPECIAL and func.overloadpacket not in _SPECIAL_PACKETS)


# What ``_operand`` saw, in rising order: the highest over the operands decides.
_CONSTANT, _PLAIN, _OTHER, _FOREIGN = 0, 1, 2, 3
# Tensor types torch's simulator lets through as they are (its ``_check_for_subclass``).
_UNWRAPPED = (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer, FakeTensor)


def _operand(value: Any, found: list) -> int:
    """``_CONSTANT`` for a ``LocalTensor`` (appended to ``found``), a
    constant, or a list or tuple of those; ``_PLAIN`` for a plain tensor
    (``torch.Tensor``, ``Parameter``, ``Buffer``, ``FakeTensor``);
    ``_FOREIGN`` for another tensor subclass (a ``DTensor``: torch's
    simulator answers ``NotImplemented`` before anything else); ``_OTHER``
    for anything else (torch's own path)."""
    kind = type(value)
    if kind is LocalTensor:
        found.append(value)
        return _CONSTANT
    if kind in _CONSTANTS:
        return _CONSTANT
    if kind is list or kind is tuple:
        return max((_operand(v, found) for v in value), default=_CONSTANT)
    if kind in _UNWRAPPED:
        return _PLAIN
    if isinstance(value, torch.Tensor) and not isinstance(value, LocalTensor):
        return _FOREIGN
    return _OTHER


# ``_aliasing``'s answer for an op whose result needs all of torch's fix-up.
_FIX_UP = "fix-up"


def _aliasing(func: OpOverload) -> Any:
    """What ``return_and_correct_aliasing`` does for ``func``: ``None`` for
    nothing (no result views an input, no in-place view, no result that is
    an input); for a view (results that view inputs, nothing else) its
    ``(input index, result index)`` pairs, whose storages the fix-up shares;
    ``_FIX_UP`` for the rest (an in-place view, a result that is an input),
    which take torch's fix-up."""
    info = alias_info(func)
    if info.is_inplace_view_op or info.outs_write_aliases is not None:
        return _FIX_UP
    pairs = tuple(info.read_only_alias_match_indexes)
    return pairs or None


def _share_storages(pairs: tuple, args: tuple, out: Any) -> bool:
    """A view's fix-up as torch's ``_correct_storage_aliasing`` runs it: each
    result wrapper (or each wrapper of a list result) takes the storage of
    the input it views. ``False``, having changed nothing, where an input or
    result is not a ``LocalTensor`` (torch's fix-up then checks and answers)."""
    outs = out if type(out) is tuple else (out,)
    for arg_index, out_index in pairs:
        result = outs[out_index]
        if type(args[arg_index]) is not LocalTensor or not (
                type(result) is LocalTensor
                or (type(result) is list and all(type(r) is LocalTensor for r in result))):
            return False
    for arg_index, out_index in pairs:
        result = outs[out_index]
        for wrapper in (result if type(result) is list else (result,)):
            unsafe_set_storage(wrapper, args[arg_index])
    return True


def _column(value: Any, ranks: tuple[int, ...]) -> list:
    """``value`` as each of ``ranks`` sees it (``_at``), in rank order."""
    if type(value) is LocalTensor:
        return list(map(value._local_tensors.__getitem__, ranks))
    kind = type(value)
    if kind is list or kind is tuple:  # the items' columns, transposed
        if not value:
            return [kind() for _ in ranks]
        return [kind(row) for row in zip(*[_column(v, ranks) for v in value])]
    return [value] * len(ranks)


def _at(value: Any, rank: int) -> Any:
    """``value`` as ``rank`` sees it: its block of each ``LocalTensor``."""
    kind = type(value)
    if kind is LocalTensor:
        return value._local_tensors[rank]
    if kind is list or kind is tuple:
        return kind(_at(v, rank) for v in value)
    return value


# Metadata reads answered without an op call per rank: ``sym_size`` and
# ``dim`` as torch's mode answers them (from the wrapper's sizes), the others
# as its per-rank loop does (each rank's block, combined).
_METADATA = {
    torch.ops.aten.sym_size.default: lambda mode, t: tuple(t._size),
    torch.ops.aten.dim.default: lambda mode, t: len(t._size),
    torch.ops.aten.sym_stride.default: lambda mode, t: mode._read_each_rank(_strides, t),
    torch.ops.aten.sym_storage_offset.default:
        lambda mode, t: mode._read_each_rank(torch.Tensor.storage_offset, t),
    torch.ops.aten.sym_numel.default: lambda mode, t: mode._read_each_rank(torch.Tensor.numel, t),
    torch.ops.aten.numel.default: lambda mode, t: mode._read_each_rank(torch.Tensor.numel, t),
    torch.ops.aten.is_contiguous.default:
        lambda mode, t: mode._read_each_rank(torch.Tensor.is_contiguous, t),
}
# Collectives torch's mode runs as their composite kernel under a fresh mode
# (those it maps to its own per-rank implementations take torch's path).
_COMPOSITE_COLLECTIVES = frozenset({"_c10d_functional", "_dtensor"})
_OWN_COLLECTIVES = frozenset({
    torch.ops._dtensor.shard_dim_alltoall.default,
    torch.ops._c10d_functional.all_gather_into_tensor.default,
    torch.ops._c10d_functional.reduce_scatter_tensor.default,
    torch.ops._c10d_functional.all_to_all_single.default,
})


def _strides(block: torch.Tensor) -> list[int]:
    """``aten.sym_stride`` of a plain block: its strides as a list."""
    return list(block.stride())
