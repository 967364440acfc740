"""numpy meeting a DTensor under ``jax_semantics()``: ``np.asarray(x)``
and numpy's result of ``x * ndarray``. Conversions between a DTensor and a
host array, not ops: the mode answers them before an op's path (``mode._run``:
no rule, no reshard, no local op), as ``np.asarray`` answers on a
``jax.Array``.

* ``__array__`` (``np.asarray(x)``, and numpy's side of ``x * ndarray``:
  torch's operator gives up on an ndarray before any ``__torch_function__``):
  the global array, pending sums completed (``arrays.distribute.to_numpy``);
* ``__array_wrap__``: numpy's result back on ``x``'s mesh, laid out like
  ``x`` (JAX's broadcasting rule for a host operand), replicated where the
  shapes differ (``wrap_numpy_result``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch.distributed.tensor import DTensor

from parity import sharding_rules as R
from parity.torch_impl.collectives.redistribute import move
from parity.torch_impl.layouts import specs as S
from parity.torch_impl.semantics.operands import replicate

NAMES = frozenset({"__array__", "__array_wrap__"})

_wrap_installed = False


def install_array_wrap() -> None:
    """Give ``DTensor`` an ``__array_wrap__`` with numpy 2's signature
    ``(array, context=None, return_scalar=False)``, once, when the first
    ``jax_semantics()`` scope opens. torch's takes only ``array``, so numpy
    2 printed a ``DeprecationWarning`` on every ``x * ndarray``; the
    result is the one torch's own method gives (the mode's
    ``wrap_numpy_result`` inside the scope)."""
    global _wrap_installed
    if _wrap_installed:
        return
    original = DTensor.__array_wrap__

    def __array_wrap__(self, array, context=None, return_scalar=False):
        return original(self, array)

    __array_wrap__.__wrapped__ = original  # type: ignore[attr-defined]
    DTensor.__array_wrap__ = __array_wrap__  # type: ignore[method-assign]
    _wrap_installed = True


def convert(name: str, args: tuple, kwargs: dict) -> Any:
    """``__array__`` or ``__array_wrap__`` (a name in ``NAMES``) of a
    DTensor, as the module doc says."""
    if name == "__array_wrap__":
        return wrap_numpy_result(args[0], kwargs.get("array", args[-1]))
    # arrays/ sits above semantics/ (it distributes host data through the
    # mode's collectives): imported where numpy asks for the global array
    from parity.torch_impl.arrays.distribute import to_numpy

    array = to_numpy(args[0])
    dtype = args[1] if len(args) > 1 else kwargs.get("dtype")
    return array if dtype is None else array.astype(dtype)


def wrap_numpy_result(like: DTensor, array: Any) -> DTensor:
    """numpy's result of ``x * ndarray`` back on ``x``'s mesh.

    torch's operators give up on an ndarray operand before any
    ``__torch_function__``; numpy then computes on the global value
    (``__array__``) and hands the result to ``__array_wrap__``. It comes back
    as a DTensor laid out like ``like`` (JAX's broadcasting rule for a host
    operand), replicated where the shapes differ. Not differentiable: numpy
    computed it.
    """
    mesh = like.device_mesh
    # on ``like``'s torch mesh directly: replicated, then each rank's slice
    # (DTensor's Replicate -> Shard is a local chunk, no collective)
    replicated = replicate(np.asarray(array), mesh)
    shape = tuple(replicated.shape)
    spec = S.spec_of(like) if shape == tuple(like.shape) else ((),) * len(shape)
    spec = R.fit_to_shape(spec, shape, S.axis_sizes(mesh))
    return move(replicated, S.placements_for(spec, mesh))
