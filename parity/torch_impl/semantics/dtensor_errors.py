"""What a DTensor error means for the mode: the one place that reads
DTensor's error messages.

torch gives no exception type for "no sharding strategy": DTensor's sharding
propagation and view rules raise plain ``RuntimeError`` /
``NotImplementedError`` with a message. ``kind(err)`` sorts such an error
into what the mode does next (see ``fallback``); each phrase below is quoted
from torch's source (``torch/distributed/tensor``, torch 2.13) and has its
own test in ``tests/test_jax_semantics.py``. Phrases are tried in the order
of the table; an error that matches none is a genuine error (bad arguments,
a bug) and propagates.

| kind          | phrase                          | raised by                               |
|---------------|---------------------------------|-----------------------------------------|
| placements    | ``_StridedShard``               | ``_view_ops`` unflatten of a strided    |
|               |                                 | shard; ``_nonlinear_redux``             |
| placements    | ``redistribute the input``      | ``_view_ops``: a view that removes or   |
|               |                                 | reshapes a sharded dim                  |
| placements    | ``Please redistribute``         | ``_view_ops``: uneven flatten/unflatten |
| placements    | ``unevenly sharded``            | ``_view_ops``: "Cannot flatten unevenly |
|               |                                 | sharded tensor"                         |
| placements    | ``is invalid for input of size``| the local ``view``/``reshape`` of a     |
|               |                                 | block whose shape DTensor's view rule   |
|               |                                 | got wrong (``aten.reshape`` called      |
|               |                                 | directly on a dim split over two axes); |
|               |                                 | a genuine bad shape fails again gathered|
|               |                                 | and is raised from the full values      |
| no-strategy   | ``does not have a sharding      | ``_sharding_prop``: no strategy at all  |
|               | strategy registered``           | for the op                              |
| no-strategy   | ``Sharding propagation failed`` | ``_sharding_prop``: any other failure   |
|               |                                 | (e.g. an output size that depends on    |
|               |                                 | the data: ``masked_select``)            |
| no-strategy   | ``not supported with DTensor``  | ``_dispatch``: ``as_strided`` (DTensor  |
|               |                                 | refuses it outright)                    |
| no-strategy   | ``data is not allocated yet``   | c10's ``TensorImpl``: DTensor's         |
|               |                                 | propagation reads the values of a plain |
|               |                                 | index operand it holds without storage  |
|               |                                 | (``tensor_split`` by a tensor of        |
|               |                                 | indices)                                |
| mixed         | ``got mixed torch.Tensor and    | ``_dispatch``: a plain tensor (made     |
|               | DTensor``                       | inside a composite op) met a DTensor    |

``placements``: gather the operands, DTensor runs the op; ``no-strategy``:
compute on the gathered full values (``fallback.run_replicated``);
``mixed``: ``fallback.run_implicit``.
"""

from __future__ import annotations

PHRASES: tuple[tuple[str, str], ...] = (
    ("placements", "_StridedShard"),
    ("placements", "redistribute the input"),
    ("placements", "Please redistribute"),
    ("placements", "unevenly sharded"),
    ("placements", "is invalid for input of size"),
    ("no-strategy", "does not have a sharding strategy registered"),
    ("no-strategy", "Sharding propagation failed"),
    ("no-strategy", "not supported with DTensor"),
    ("no-strategy", "data is not allocated yet"),
    ("mixed", "got mixed torch.Tensor and DTensor"),
)


def kind(err: BaseException) -> str | None:
    """``"placements"``, ``"no-strategy"``, ``"mixed"`` or ``None`` (a
    genuine error) for an exception raised by an op on DTensors."""
    if not isinstance(err, (RuntimeError, NotImplementedError)):
        return None
    text = str(err)
    for found, phrase in PHRASES:
        if phrase in text:
            return found
    return None

