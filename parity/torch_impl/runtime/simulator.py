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
2. ``_each_rank``: a common op -- an ``aten`` op that draws no random
   numbers, whose operands are ``LocalTensor``s of this mode's ranks and
   constants, in at most lists and tuples -- runs through a shorter
   per-rank loop than torch's ``_for_each_rank_run_func``: no pytree
   flatten and unflatten per rank, and no save and restore of each rank's
   random-generator state around an op that never reads it. The op, the
   blocks it gets and the way the results are combined (and aliased) are
   torch's own; the generator is left in the state torch leaves it (the
   last rank's, whose state such an op does not change). Anything else
   (random ops, factories, collectives, ``SymInt`` operands, plain or other
   tensors among the operands, a mode that is disabled or not the enabled
   one) takes torch's own path; an operand of another tensor subclass (a
   ``DTensor``, whose own dispatch runs next) gets torch's first answer,
   ``NotImplemented``, without torch's pytree walk.
3. A view's aliasing fix-up (torch's ``return_and_correct_aliasing``) runs
   with this mode pushed back on the stack: its reads of the wrappers'
   sizes, strides and offsets come to this mode instead of each building,
   entering and leaving a fresh ``LocalTensorMode`` (about 150 us a read).
"""

from __future__ import annotations

from typing import Any

import torch

from parity.torch_impl.runtime.torch_compat import (
    FakeTensor,
    LocalTensor,
    LocalTensorMode,
    OpOverload,
    combine_rank_results,
    disable_torch_function,
    enabled_local_tensor_mode,
    is_inplace_op,
    pop_dispatch_mode,
    push_dispatch_mode,
    return_and_correct_aliasing,
    set_rng_state,
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
                           set_rng_state)
_SEEDED = torch.Tag.nondeterministic_seeded
_INPLACE_VIEW = torch.Tag.inplace_view


class SimulatedRanksMode(LocalTensorMode):
    """``LocalTensorMode`` with the speed-ups of the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sorted_ranks = tuple(sorted(self.ranks))
        self._plain_ops: dict[Any, bool] = {}  # op -> whether _each_rank may run it

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        with disable_torch_function():
            if kwargs is None:
                kwargs = {}
            if not self._disable and _SHORT_LOOP:
                found: list = []
                seen = max(max((_operand(a, found) for a in args), default=_CONSTANT),
                           max((_operand(v, found) for v in kwargs.values()), default=_CONSTANT))
                if seen == _FOREIGN:  # torch's first answer: another subclass handles it
                    return NotImplemented
                if seen == _CONSTANT and found and self._runs_each_rank(func, found):
                    return self._each_rank(func, args, kwargs)
            return super().__torch_dispatch__(func, types, args, kwargs)

    def _runs_each_rank(self, func, found: list) -> bool:
        plain = self._plain_ops.get(func)
        if plain is None:
            plain = self._plain_ops[func] = _plain_op(func)
        if not plain or any(t._ranks != self.ranks for t in found):
            return False
        states = self._per_rank_rng_states
        return (enabled_local_tensor_mode() is self and len(states) == len(self.ranks)
                and all(r in states for r in self.ranks))

    def _each_rank(self, func, args: tuple, kwargs: dict) -> Any:
        results = {}
        rank = None
        try:
            for rank in self._sorted_ranks:
                rank_args = tuple(_at(a, rank) for a in args)
                if kwargs:
                    results[rank] = func(*rank_args, **{k: _at(v, rank) for k, v in kwargs.items()})
                else:
                    results[rank] = func(*rank_args)
        finally:
            # torch sets each rank's generator state before its call and leaves
            # the last one entered; such an op never changes it.
            if rank is not None:
                set_rng_state(*self._per_rank_rng_states[rank])
        if is_inplace_op(func):
            out = args[0]
            if _INPLACE_VIEW in func.tags:
                out._sync_meta()
            return out
        out = combine_rank_results(results, None)
        # Speed: a view's aliasing fix-up reads the wrappers' sizes, strides and
        # offsets through dispatch. With this mode off the stack (as it is inside
        # its own dispatch) each read made, entered and left a fresh
        # LocalTensorMode (about 150 us: 96 reads, 14 ms of an 80 ms Keras MLP
        # step); with the mode back on the stack the reads come here, and run the
        # same per-rank reads.
        push_dispatch_mode(self)
        try:
            return return_and_correct_aliasing(func, args, kwargs, out)
        finally:
            pop_dispatch_mode()


def _plain_op(func: Any) -> bool:
    """Whether ``func`` may take ``_each_rank``: an ``aten`` op that draws no
    random numbers and that torch's per-rank loop does not single out."""
    return (type(func) is OpOverload and func.namespace == "aten" and _SEEDED not in func.tags
            and func not in _SPECIAL and func.overloadpacket not in _SPECIAL_PACKETS)


# What ``_operand`` saw, in rising order: the highest over the operands decides.
_CONSTANT, _OTHER, _FOREIGN = 0, 1, 2
# Tensor types torch's simulator lets through as they are (its ``_check_for_subclass``).
_UNWRAPPED = (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer, FakeTensor)


def _operand(value: Any, found: list) -> int:
    """``_CONSTANT`` for a ``LocalTensor`` (appended to ``found``), a
    constant, or a list or tuple of those; ``_FOREIGN`` for another tensor
    subclass (a ``DTensor``: torch's simulator answers ``NotImplemented``
    before anything else); ``_OTHER`` for anything else (torch's own path)."""
    kind = type(value)
    if kind is LocalTensor:
        found.append(value)
        return _CONSTANT
    if kind in _CONSTANTS:
        return _CONSTANT
    if kind is list or kind is tuple:
        return max((_operand(v, found) for v in value), default=_CONSTANT)
    if isinstance(value, torch.Tensor) and kind not in _UNWRAPPED \
            and not isinstance(value, LocalTensor):
        return _FOREIGN
    return _OTHER


def _at(value: Any, rank: int) -> Any:
    """``value`` as ``rank`` sees it: its block of each ``LocalTensor``."""
    kind = type(value)
    if kind is LocalTensor:
        return value._local_tensors[rank]
    if kind is list or kind is tuple:
        return kind(_at(v, rank) for v in value)
    return value
