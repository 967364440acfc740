"""Which DTensor errors mean "no sharding strategy for these placements".

torch gives no exception type for it: DTensor's sharding propagation and
view rules raise plain ``RuntimeError`` / ``NotImplementedError`` with a
message. This is the one place that reads those messages; each phrase below
is quoted from torch's source (``torch/distributed/tensor``) and has its own
test in ``tests/test_jax_semantics.py``. When it matches, the mode gathers
the operands above autograd and runs the op again (see ``mode``).

| phrase                    | raised by (torch 2.13)                                   |
|---------------------------|----------------------------------------------------------|
| ``_StridedShard``         | ``_view_ops``: unflatten of a strided shard;             |
|                           | ``_nonlinear_redux``: "does not support _StridedShard!"  |
| ``redistribute the input``| ``_view_ops``: a view that removes or reshapes a sharded |
|                           | dim ("Please redistribute the input first.")             |
| ``Please redistribute``   | ``_view_ops``: uneven flatten/unflatten ("Please         |
|                           | redistribute the tensor before this operation.")         |
| ``unevenly sharded``      | ``_view_ops``: "Cannot flatten unevenly sharded tensor"  |
"""

from __future__ import annotations

NO_STRATEGY_PHRASES = ("_StridedShard", "redistribute the input", "Please redistribute",
                       "unevenly sharded")


def no_strategy(err: BaseException) -> bool:
    """Whether ``err`` (from running an op on DTensors) is DTensor saying it
    has no strategy for the operands' placements -- as opposed to a genuine
    error (bad arguments, a bug) that must propagate."""
    if not isinstance(err, (RuntimeError, NotImplementedError)):
        return False
    text = str(err)
    return any(phrase in text for phrase in NO_STRATEGY_PHRASES)
