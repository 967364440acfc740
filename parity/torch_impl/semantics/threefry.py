"""Counter-based random numbers: JAX's partitionable threefry in torch ops.

The value at a tensor's global (row-major) index ``i`` is a function of a
key and ``i`` only -- ``threefry2x32(key, (i >> 32, i & 0xFFFFFFFF))``, as
JAX's ``jax.random.bits`` with ``jax_threefry_partitionable`` (JAX's
default): a rank computes its block's values from its block's indices,
without drawing anything for the rest of the tensor, and the values do not
depend on how the tensor is cut.

``bits32(key, index)`` equals ``jax.random.bits(key, shape, uint32)`` at
those indices and ``uniform`` equals ``jax.random.uniform`` bit for bit
(float16/32/64 and bfloat16, JAX's mantissa construction); ``normal`` is
JAX's ``sqrt(2) * erfinv(u)`` on ``u`` uniform in ``(-1, 1)``, with torch's
``erfinv`` (within float rounding of JAX's). The arithmetic runs on int64
tensors masked to 32 bits (torch's uint32 lacks kernels on CPU). ``index``
is an int64 tensor of global linear indices, any shape; every function is
elementwise in it. ``values(draw, key, index)`` is the one entry the
random ops use: a ``Draw`` names what each element is (a uniform, a
normal, an integer, a Bernoulli or a dropout mask value).
"""

from __future__ import annotations

import dataclasses
import math

import torch

_MASK = 0xFFFFFFFF
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA


def threefry2x32(key: tuple[int, int], x0: torch.Tensor,
                 x1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Threefry-2x32 (20 rounds) of the counter pairs ``(x0, x1)`` (int64
    tensors holding uint32 values) under ``key`` (two uint32 ints), as
    JAX's ``threefry2x32_p``."""
    k0, k1 = (int(k) & _MASK for k in key)
    ks = (k0, k1, k0 ^ k1 ^ _PARITY)
    x0 = (x0 + ks[0]).bitwise_and_(_MASK)
    x1 = (x1 + ks[1]).bitwise_and_(_MASK)
    for group in range(5):
        for r in _ROTATIONS[group % 2]:
            x0.add_(x1).bitwise_and_(_MASK)
            x1 = (x1 << r).bitwise_or_(x1 >> (32 - r)).bitwise_and_(_MASK).bitwise_xor_(x0)
        x0.add_(ks[(group + 1) % 3]).bitwise_and_(_MASK)
        x1.add_(ks[(group + 2) % 3] + group + 1).bitwise_and_(_MASK)
    return x0, x1


def _hashed(key: tuple[int, int], index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if index.dtype != torch.int64:
        raise TypeError(f"threefry: index must be int64, got {index.dtype}")
    return threefry2x32(key, index >> 32, index & _MASK)


def bits32(key: tuple[int, int], index: torch.Tensor) -> torch.Tensor:
    """32 random bits per index (int64 in ``[0, 2**32)``): JAX's
    ``random_bits(key, 32, shape)``, partitionable."""
    b0, b1 = _hashed(key, index)
    return b0.bitwise_xor_(b1)


# dtype -> (random bits JAX draws, mantissa bits, the integer view dtype)
_FLOATS = {
    torch.float64: (64, 52, torch.int64),
    torch.float32: (32, 23, torch.int32),
    torch.float16: (16, 10, torch.int16),
    torch.bfloat16: (8, 7, torch.int16),
}


def _unit(key: tuple[int, int], index: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Floats in ``[0, 1)`` of ``dtype`` from the mantissa bits, as JAX's
    ``_uniform`` (the random bits shifted into the mantissa of 1.0, minus 1)."""
    if dtype not in _FLOATS:
        raise TypeError(f"threefry.uniform: dtype {dtype} is not a float dtype "
                        f"({', '.join(map(str, _FLOATS))})")
    nbits, nmant, view = _FLOATS[dtype]
    if nbits == 64:
        b0, b1 = _hashed(key, index)
        mantissa = (b0 << 20).bitwise_or_(b1 >> 12)  # the top 52 of (b0 << 32 | b1)
    else:
        mantissa = bits32(key, index).bitwise_and_((1 << nbits) - 1) >> (nbits - nmant)
    one = torch.tensor(1.0, dtype=dtype, device="cpu").view(view).item()  # a host constant
    return mantissa.bitwise_or_(one).to(view).view(dtype) - 1.0


def uniform(key: tuple[int, int], index: torch.Tensor, dtype: torch.dtype,
            low: float = 0.0, high: float = 1.0) -> torch.Tensor:
    """Uniform in ``[low, high)`` of ``dtype``: ``jax.random.uniform(key,
    shape, dtype, low, high)`` at ``index``. ``TypeError`` for a non-float
    dtype."""
    unit = _unit(key, index, dtype)
    lo = torch.tensor(low, dtype=dtype, device=index.device)
    span = torch.tensor(high, dtype=dtype, device=index.device) - lo
    if dtype in (torch.bfloat16, torch.float16):
        # JAX's program for half types: the product and the sum each rounded
        # to the dtype (XLA:CPU without native half arithmetic computes each op
        # in float32 and rounds it; a host with native float16 FMA contracts
        # the two into one rounding, so JAX's own float16 values differ
        # between such hosts: tests/test_threefry.py)
        scaled = unit * span + lo
    elif dtype == torch.float32:
        # ``unit * span + lo`` rounded once, as XLA:CPU's fused multiply-add
        # (the float64 product of two float32 values is exact)
        scaled = (unit.double() * span.double() + lo.double()).to(dtype)
    else:
        scaled = torch.addcmul(lo, unit, span)
    return torch.maximum(scaled, lo)


def normal(key: tuple[int, int], index: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Standard normal of ``dtype``: JAX's ``sqrt(2) * erfinv(u)``, ``u``
    uniform in ``(-1, 1)`` (half types computed in float32)."""
    lo = float(torch.nextafter(torch.tensor(-1.0, dtype=dtype, device="cpu"),
                               torch.tensor(0.0, dtype=dtype, device="cpu")))  # a host constant
    u = uniform(key, index, dtype, lo, 1.0)
    wide = u if dtype in (torch.float32, torch.float64) else u.float()
    return (torch.erfinv(wide) * math.sqrt(2)).to(dtype)


def integers(key: tuple[int, int], index: torch.Tensor, low: int, high: int,
             dtype: torch.dtype) -> torch.Tensor:
    """Integers in ``[low, high)`` of ``dtype``: ``low + floor(u * (high -
    low))`` with ``u`` a float64 uniform (parity's own mapping, not
    ``jax.random.randint``'s). ``ValueError`` unless ``low < high``."""
    if not low < high:
        raise ValueError(f"threefry.integers: need low < high, got low={low}, high={high}")
    u = _unit(key, index, torch.float64)
    return (torch.floor(u * float(high - low)).to(torch.int64) + low).to(dtype)


@dataclasses.dataclass(frozen=True)
class Draw:
    """What ``values`` draws per element, of ``dtype``:

    * ``"uniform"``: in ``[low, high)`` (``uniform``);
    * ``"normal"``: ``mean + std * normal`` (exactly ``normal`` for the
      standard one);
    * ``"integers"``: in ``[low, high)`` (``integers``);
    * ``"bernoulli"``: 1 where a float32 uniform ``u < p``, else 0 (JAX's
      ``bernoulli``);
    * ``"dropout"``: torch's dropout noise, ``1 / (1 - p)`` where the
      element is kept (``u < 1 - p``), else 0; all 0 for ``p == 1``.
    """

    kind: str
    dtype: torch.dtype
    low: float = 0.0
    high: float = 1.0
    mean: float = 0.0
    std: float = 1.0
    p: float = 0.5

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"threefry.Draw: kind {self.kind!r} is not one of {sorted(_KINDS)}")


def values(draw: Draw, key: tuple[int, int], index: torch.Tensor) -> torch.Tensor:
    """``draw``'s value at each global ``index`` under ``key`` (see ``Draw``).
    ``TypeError``/``ValueError`` as ``uniform`` and ``integers``."""
    return _KINDS[draw.kind](draw, key, index)


def _standard_or_scaled_normal(draw: Draw, key, index) -> torch.Tensor:
    out = normal(key, index, draw.dtype)
    return out if (draw.mean, draw.std) == (0.0, 1.0) else out * draw.std + draw.mean


def _dropout_noise(draw: Draw, key, index) -> torch.Tensor:
    if draw.p == 1.0:
        return torch.zeros(index.shape, dtype=draw.dtype, device=index.device)
    keep = uniform(key, index, torch.float32) < 1 - draw.p
    return keep.to(draw.dtype).div_(1 - draw.p)


_KINDS = {
    "uniform": lambda d, key, index: uniform(key, index, d.dtype, d.low, d.high),
    "normal": _standard_or_scaled_normal,
    "integers": lambda d, key, index: integers(key, index, int(d.low), int(d.high), d.dtype),
    "bernoulli": lambda d, key, index: (uniform(key, index, torch.float32) < d.p).to(d.dtype),
    "dropout": _dropout_noise,
}
