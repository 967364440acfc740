"""Fourier transforms (``torch.fft``): the operand's spec carries over.

JAX's ``fft`` keeps the operand's sharding, even on the transformed dims
(jax 0.10.2, explicit mesh: ``jnp.fft.fft(x, n=10, axis=1)`` of
``f32[4,6@data,8]`` is ``c64[4,10@data,8]``; ``rfft`` with ``n=10`` is
``c64[4,6@data,8]``); where the new length does not divide by the dim's
shard count JAX refuses ("padding on sharded dims ... is not
implemented"). DTensor runs the transform on each rank's block of a sharded
transformed dim: MKL refuses it ("Inconsistent configuration parameters"),
with or without ``n``. Here the transformed dims are gathered before the op
and the output is laid out with the operand's spec, fitted to its shape (a
dim it no longer divides is replicated: the case JAX refuses, ``chosen``).

| ops                                            | transformed dims (default)    |
|------------------------------------------------|-------------------------------|
| ``fft``, ``ifft``, ``rfft``, ``irfft``,        | ``dim`` (-1)                  |
| ``hfft``, ``ihfft``                            |                               |
| ``fft2``, ``ifft2``, ``rfft2``, ``irfft2``,    | ``dim`` ((-2, -1))            |
| ``hfft2``, ``ihfft2``                          |                               |
| ``fftn``, ``ifftn``, ``rfftn``, ``irfftn``,    | ``dim``; else the last        |
| ``hfftn``, ``ihfftn``                          | ``len(s)`` dims; else all     |

``out=`` is not covered (the result must be the ``out`` tensor itself).
"""

from __future__ import annotations

import torch

from parity import sharding_rules as R
from parity.torch_impl.layouts import specs as S
from parity.torch_impl.semantics.rules.registry import Call, NotCovered, Plan, rule_for

_ONE = ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft")
_TWO = ("fft2", "ifft2", "rfft2", "irfft2", "hfft2", "ihfft2")
_N = ("fftn", "ifftn", "rfftn", "irfftn", "hfftn", "ihfftn")


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _transformed(call: Call, ndim: int) -> list[int]:
    """The dims the call transforms, normalised; ``NotCovered`` for an
    argument form this rule does not parse."""
    if call.name in _ONE:
        dim = call.arg(2, "dim", default=-1)
        dims = [dim]
    else:
        dim = call.arg(2, "dim", default=(-2, -1) if call.name in _TWO else None)
        if dim is None:
            s = call.arg(1, "s")
            dims = list(range(ndim)) if s is None else list(range(ndim - len(s), ndim))
        else:
            dims = [dim] if _int(dim) else list(dim)
    if not all(_int(d) and -ndim <= d < ndim for d in dims):
        raise NotCovered  # torch raises its own error for it
    return sorted({d % ndim for d in dims})


@rule_for(*[(getattr(torch.fft, name), name) for name in _ONE + _TWO + _N])
def fourier(call: Call) -> Plan:
    if call.kwargs.get("out") is not None:
        raise NotCovered
    loc, x = call.only_self()
    if x.ndim == 0:
        raise NotCovered  # torch refuses a 0-d transform
    spec, sizes = S.spec_of(x), call.sizes
    touched = _transformed(call, x.ndim)

    return Plan({loc: R.replicate_dims(spec, touched)},
                lambda outs: [R.fit_to_shape(spec, o.shape, sizes) if o.ndim == len(spec)
                              else None for o in outs])
