"""The op on its prepared operands (the mode's last step before its
outputs): which way it runs.

Each rank's block (``local_ops``: the reductions, indexing, tensordot,
batch norm, vector @ matrix, attention DTensor cannot run as JAX does), the
op on every rank's full copy where DTensor's strategy is wrong or missing
(``fallback.before_dtensor``), else DTensor itself; where DTensor refuses,
``fallback.recover`` by the kind of refusal.
"""

from __future__ import annotations

from typing import Any

from torch.distributed.tensor.debug import CommDebugMode

from parity.torch_impl.collectives import flat_groups
from parity.torch_impl.semantics import fallback, local_ops


def compute(func: Any, name: str, args: tuple, kwargs: dict, mesh: Any,
            grad: bool) -> tuple[Any, bool]:
    """``(out, direct)``: the op on its prepared operands -- each rank's
    block (``local_ops``), the fallback where DTensor's strategy is wrong or
    missing (``fallback.before_dtensor``), else DTensor itself (``direct``),
    recovering where DTensor refuses (``fallback.recover``). Raises what the
    op raises."""
    # whether DTensor, running the op itself, should find the flattened
    # meshes: asked first, of the operands as prepared
    merge = flat_groups.merge_needed(mesh, (args, kwargs))
    if name in local_ops.LOCAL_REDUCTIONS:
        out = local_ops.run_local_reduction(func, args, kwargs)
        if isinstance(out, local_ops.OnWhole):  # each rank on the gathered operands
            return fallback.run_replicated(func, args, kwargs, mesh, out.why), False
        if out is not None:
            return out, False
    if fallback.before_dtensor(func, args, kwargs, grad):
        # DTensor's strategy is wrong for some placements (fallback.KNOWN_WRONG),
        # or it has none for the backward (fallback.BACKWARD_MISSING)
        return fallback.run_replicated(func, args, kwargs, mesh,
                                       "DTensor's strategy for it is wrong"), False
    try:
        # DTensor lays the operands out itself where its strategy needs
        # (torch 2.14.1 gathers ``any``'s operand, completes _foreach_norm's
        # partial norms): one collective over the flattened group, not one
        # per mesh axis with "N sequential all_gather operations" in the log.
        # Such a call is not ``direct``: the fast path, which registers no
        # flattened mesh, must not take it over.
        if not merge:
            return func(*args, **kwargs), True
        with flat_groups.every_registered(mesh), CommDebugMode() as comm:
            out = func(*args, **kwargs)
        return out, comm.get_total_counts() == 0
    except (NotImplementedError, RuntimeError) as err:
        return fallback.recover(err, func, args, kwargs, mesh), False
