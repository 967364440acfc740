"""Random ops whose values do not depend on the sharding.

In JAX a key gives the same numbers whatever the sharding: a model trains
to the same curve on 8 devices as on 1. DTensor does not: on CUDA its
offset-based Philox tracker keeps the ranks consistent but its values
depend on the layout (see below; ``torch.distributed.tensor._random``
refuses a CPU mesh); on CPU and over simulated ranks each rank drew for its
own block from its own generator, so ``F.dropout(x)`` of a sharded ``x``
differed from the unsharded program's after the same ``torch.manual_seed``.

Under ``jax_semantics()`` (``random="invariant"``, the default) every
random op with a DTensor operand draws what the *unsharded* program draws --
torch's own generator, called once for the whole global shape, exactly as
plain torch calls it -- and each rank keeps its block:

* ``dropout`` (``F.dropout``, ``nn.Dropout``, ``torch.dropout``) and the
  feature dropouts (``dropout1d/2d/3d``, ``torch.feature_dropout``): the
  noise torch's CPU kernel makes (``empty(shape).bernoulli_(1 - p)``, then
  ``div_(1 - p)``; feature noise ``(N, C, 1, ...)``) is drawn for the global
  shape, laid out as the input (a local slice, no communication) and
  multiplied in: the input is never gathered, and the gradient uses the same
  mask (it is a product with a constant). On CUDA torch's out-of-place
  dropout is its fused kernel (``native_dropout``), whose mask is not
  ``bernoulli_``'s: there the noise is that kernel's mask for the global
  shape and strides, the product in its accumulate type (``_fused_noise``);
* ``rand_like``, ``randn_like``, ``randint_like``: drawn for the global
  shape, laid out as the operand;
* in place (``normal_``, ``uniform_``, ``bernoulli_``, ``random_``,
  ``exponential_``, ``geometric_``, ``log_normal_``, ``cauchy_``, and
  ``nn.init``'s ``uniform_``, ``normal_``, ``kaiming_uniform_``, which reach
  the mode as themselves; the other initialisers call those methods): the op
  runs on a full tensor of the operand's shape and dtype and each rank
  copies its block in;
* the rest (``bernoulli``, ``multinomial``, ``normal`` with tensor
  arguments, ``poisson``, the alpha dropouts, ``rrelu`` in training,
  ``scaled_dot_product_attention`` with ``dropout_p > 0``, fractional max
  pooling without ``_random_samples``): the operands
  are gathered and the op runs on every rank's full copy (``fallback``), the
  result laid out as the first operand (attention: as the query's batch and
  head dims).

Every draw runs on the operand's device from that device's generator
(``torch.manual_seed`` seeds them all): on CUDA -- simulated ranks on one
GPU or one process per GPU -- the values are the unsharded CUDA program's.

Over simulated ranks torch's ``LocalTensorMode`` runs an op once per rank
from the same generator state and leaves the state one call advanced, as
one process would; on gloo ranks every process holds the same seed. Either
way every rank draws the same global tensor: the values equal the unsharded
program's bit for bit, on any mesh and layout.

The cost of ``"invariant"``, and its bound: each rank draws the whole
tensor -- the unsharded op's time, and one transient buffer of the global
shape per rank (global numel x itemsize; the result keeps only the block).
A faithful per-block scheme does not exist for torch's CPU generator:
MT19937 cannot skip ahead to a block's first element, ``normal_``'s
vectorised path pairs values by position in the whole tensor, and
``bernoulli_`` seeds one MKL stream per call from the generator. DTensor's
CUDA ``OffsetBasedRNGTracker`` does not give the unsharded values either:
it moves the Philox offset of each shard to ``shard_linear_index x
local_numel`` (``_compute_rng_offsets``), so the ranks' values are disjoint
and agree across ranks, but depend on the layout and differ from one
device's (and it refuses a CPU mesh).

``random="counter"`` is the per-block scheme, for tensors too large to
draw whole on every rank: dropout (plain and feature forms), ``rand_like``,
``randn_like``, ``randint_like``, ``uniform_``/``normal_``/``bernoulli_``
(scalar ``p``) and ``nn.init.uniform_``/``normal_`` (hence the initialisers
built on them: ``xavier_*``, ``trunc_normal_``, ...) draw each element from
threefry-2x32 of a per-call key and its global row-major index
(``semantics.threefry``: JAX's partitionable threefry, equal to
``jax.random.bits``/``uniform`` bit for bit). The key is two words drawn
from the operand's device's generator (or the op's ``generator=``), once per call, so
``torch.manual_seed`` still fixes a run and successive calls differ. A
rank builds only its block's indices (per dim a range cut as the dim is)
and evaluates the hash there: nothing of global size. The unsharded
reference under ``"counter"`` is the same program on plain tensors inside
the same ``jax_semantics(random="counter")`` scope -- those ops draw from
threefry too -- not plain torch outside it (whose CPU generator has no
per-block form). The other random ops keep the ``"invariant"`` global draw
under ``"counter"`` (their plain-tensor calls stay torch's): both sides
then still agree. The cost: about 170 elementwise int64 ops per element
(``benchmarks``: the ``random`` rows).

``random="per_rank"`` keeps torch's own behaviour (each rank draws for its
block; DTensor's CUDA tracker where it applies).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor, Replicate

from parity.torch_impl.semantics import fallback, pending, threefry
from parity.torch_impl.collectives import redistribute
from parity.torch_impl.layouts import specs as S
from parity.torch_impl.runtime.torch_compat import maybe_disable_local_tensor_mode

_DROPOUT = frozenset({F.dropout, torch.dropout, torch.dropout_})
_FEATURE_DROPOUT = frozenset({F.dropout1d, F.dropout2d, F.dropout3d, torch.feature_dropout,
                              torch.feature_dropout_})
_LIKE = frozenset({torch.rand_like, torch.randn_like, torch.randint_like})
_IN_PLACE = frozenset(getattr(torch.Tensor, name) for name in (
    "normal_", "uniform_", "bernoulli_", "random_", "exponential_", "geometric_",
    "log_normal_", "cauchy_"))
# nn.init's functions that hand themselves to __torch_function__ (the mode
# receives the init function, not the Tensor method it calls): run on a full
# tensor of the operand's shape, the block copied in, as the in-place ops.
_INIT = frozenset({torch.nn.init.uniform_, torch.nn.init.normal_,
                   torch.nn.init.kaiming_uniform_})
# fractional max pooling draws its pooling regions (``torch.rand`` of the
# batch and channel sizes) unless ``_random_samples`` is given
# (without indices torch hands the public boolean-dispatch function over)
_FRACTIONAL_POOL = frozenset({F.fractional_max_pool2d, F.fractional_max_pool3d,
                              F.fractional_max_pool2d_with_indices,
                              F.fractional_max_pool3d_with_indices})
_GATHERED = frozenset({
    torch.bernoulli, torch.Tensor.bernoulli, torch.multinomial, torch.Tensor.multinomial,
    torch.normal, torch.poisson, F.alpha_dropout, F.feature_alpha_dropout,
    torch.alpha_dropout, torch.feature_alpha_dropout, F.rrelu, torch.rrelu,
    F.scaled_dot_product_attention,
}) | _FRACTIONAL_POOL
_ALPHA = frozenset({F.alpha_dropout, F.feature_alpha_dropout, torch.alpha_dropout,
                    torch.feature_alpha_dropout})
RANDOM_OPS = _DROPOUT | _FEATURE_DROPOUT | _LIKE | _IN_PLACE | _INIT | _GATHERED
# drawn per block from threefry under random="counter" (the rest: as "invariant")
_COUNTER = _DROPOUT | _FEATURE_DROPOUT | _LIKE | frozenset({
    torch.Tensor.uniform_, torch.Tensor.normal_, torch.Tensor.bernoulli_,
    torch.nn.init.uniform_, torch.nn.init.normal_})


def _arg(args: tuple, kwargs: dict, index: int, name: str, default: Any) -> Any:
    if name in kwargs:
        return kwargs[name]
    return args[index] if len(args) > index else default


@torch._dynamo.assume_constant_result
def listed(func: Any) -> bool:
    """Whether ``func`` is one of the random ops this module handles."""
    return func in RANDOM_OPS


_listed = listed


def draws(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether this call draws random numbers (a dropout in training with
    ``0 < p``, attention with ``dropout_p > 0``, ``rrelu`` in training, any
    other listed op)."""
    if not _listed(func):
        return False
    if func in _DROPOUT or func in _FEATURE_DROPOUT or func in _ALPHA:
        train = kwargs.get("training", kwargs.get("train", args[2] if len(args) > 2 else True))
        return bool(train) and _arg(args, kwargs, 1, "p", 0.5) > 0
    if func is F.scaled_dot_product_attention:
        return _arg(args, kwargs, 4, "dropout_p", 0.0) > 0
    if func in (F.rrelu, torch.rrelu):
        return bool(_arg(args, kwargs, 3, "training", False))
    if func in _FRACTIONAL_POOL:
        return _arg(args, kwargs, 5, "_random_samples", None) is None
    return True


def by_counter(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether ``random="counter"`` draws this call per block from threefry
    (a call ``draws`` accepts, of an op in the counter set; ``bernoulli_``
    with a scalar ``p``)."""
    if not _listed(func) or func not in _COUNTER:
        return False
    if func is torch.Tensor.bernoulli_ and isinstance(_arg(args, kwargs, 1, "p", 0.5),
                                                      torch.Tensor):
        return False
    return draws(func, args, kwargs)


def _full(shape, dtype, device: torch.device, fill) -> torch.Tensor:
    """A tensor of the global ``shape`` on ``device`` (the operand's) filled
    by ``fill`` (in place) from that device's generator: every rank the same
    values (see the module doc)."""
    t = torch.empty(tuple(shape), dtype=dtype, device=device)
    fill(t)
    return t


def _laid_out(full: torch.Tensor, mesh, placements: tuple) -> DTensor:
    """``full`` (the same on every rank) as a DTensor with ``placements``:
    each rank keeps its block (no communication)."""
    whole = DTensor.from_local(full, mesh, [Replicate()] * mesh.ndim, run_check=False,
                               shape=full.shape, stride=full.stride())
    return whole if tuple(placements) == tuple(whole.placements) else whole.redistribute(
        mesh, tuple(placements))


def _laid_out_as(full: torch.Tensor, like: DTensor) -> DTensor:
    return _laid_out(full, like.device_mesh, tuple(like.placements))


def run(func: Any, args: tuple, kwargs: dict, mesh, counter: bool = False) -> Any:
    """``func(*args, **kwargs)`` (a call ``draws`` accepts, with a DTensor
    operand) with the unsharded program's random values, laid out as the
    module doc says; ``counter``: the calls ``by_counter`` accepts are drawn
    per block from threefry (``run_counter``)."""
    args = tuple(pending.complete(a) if isinstance(a, DTensor) else a for a in args)
    kwargs = {k: pending.complete(v) if isinstance(v, DTensor) else v for k, v in kwargs.items()}
    drawn_by_counter = counter and by_counter(func, args, kwargs)
    index = _INPLACE_INDEX.get(func)
    inplace_at = index if index is not None and _arg(args, kwargs, index, "inplace", False) else None
    if not drawn_by_counter:
        if func in _DROPOUT or func in _FEATURE_DROPOUT:
            return _dropout(func, args, kwargs)
        if func in _LIKE:
            return _like(func, args, kwargs)
        if func in _IN_PLACE:
            return _in_place(func, args, kwargs)
        if func in _INIT:
            kwargs = dict(kwargs)
            x = kwargs.pop("tensor") if "tensor" in kwargs else args[0]
            rest = () if not args or args[0] is not x else tuple(args[1:])
            with torch.no_grad():  # as nn.init itself
                return _in_place(func, (x,) + rest, kwargs)
    if drawn_by_counter:
        return run_counter(func, args, kwargs)
    # the rest: on the gathered operands, laid out as the first operand
    return fallback.run_gathered_random(func, args, kwargs, mesh, inplace_at)


def _dropout(func: Any, args: tuple, kwargs: dict) -> DTensor:
    x = args[0]
    p = float(_arg(args, kwargs, 1, "p", 0.5))
    inplace = func in (torch.dropout_, torch.feature_dropout_) or bool(
        _arg(args, kwargs, 3, "inplace", False))
    if not isinstance(x, DTensor):
        raise NotImplementedError  # a DTensor p: not a call torch accepts
    feature = func in _FEATURE_DROPOUT
    if feature:
        # torch's make_feature_noise: (N, C, 1, ...); dropout1d/2d/3d on an
        # unbatched input add the batch dim first, as F.dropoutNd does
        # (dropout2d takes a 3-d input as batched (N, C, L), as torch does)
        batched = {F.dropout1d: 3, F.dropout3d: 5}.get(func)
        if batched is not None and x.ndim == batched - 1:
            out = _dropout(torch.feature_dropout, (x.unsqueeze(0), p, True), {})
            return out.squeeze(0) if not inplace else x.copy_(out.squeeze(0))
        shape = (x.shape[0], x.shape[1]) + (1,) * (x.ndim - 2)
    else:
        shape = tuple(x.shape)
    if p == 1.0:
        noise = torch.zeros(shape, dtype=x.dtype, device=x.device)
    elif not feature and not inplace and _fused(x):
        noise = _laid_out_as(_fused_noise(x, p), x)
        if noise.dtype == x.dtype:
            return x * noise
        # half types: the product in the kernel's float, rounded once, as torch's
        return (x.to(noise.dtype) * noise).to(x.dtype)
    else:
        noise = _full(shape, x.dtype, x.device, lambda t: t.bernoulli_(1 - p).div_(1 - p))
    if feature:
        # expanded to x's shape, so that the product (bitwise torch's
        # broadcast product) and its gradient have x's placements
        noise = noise.expand(tuple(x.shape)).contiguous()
    noise = _laid_out_as(noise, x)
    return x.mul_(noise) if inplace else x * noise


# devices where torch's out-of-place dropout is its fused kernel
# (``native_dropout``; ATen's ``is_fused_kernel_acceptable``), whose mask is
# not ``bernoulli_``'s: the kernel draws Philox numbers in its own order
_FUSED_DROPOUT_DEVICES = frozenset({"cuda", "xpu"})


def _fused(x: DTensor) -> bool:
    return x.device.type in _FUSED_DROPOUT_DEVICES and x.numel() > 0


def _fused_noise(x: DTensor, p: float) -> torch.Tensor:
    """The noise of torch's fused dropout of a tensor of ``x``'s global
    shape and strides (the kernel's draw order follows the memory order of a
    dense input): ``native_dropout``'s mask, 0 or ``1 / (1 - p)`` in the
    kernel's accumulate type (float32 for the half types), the scale
    computed as the kernel does (``1 / (1 - p)`` in that type)."""
    acc = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    buffer = torch.empty_strided(tuple(x.shape), tuple(x.stride()), dtype=x.dtype,
                                 device=x.device)
    _, mask = torch.native_dropout(buffer, p, True)
    return mask.to(acc).div_(1 - p).contiguous()


def _like(func: Any, args: tuple, kwargs: dict) -> DTensor:
    x = args[0]
    dtype = kwargs.get("dtype") or x.dtype
    rest = {k: v for k, v in kwargs.items() if k not in ("dtype", "layout", "device",
                                                         "requires_grad", "memory_format",
                                                         "pin_memory")}
    plain = torch.empty(tuple(x.shape), dtype=x.dtype, device=x.device)
    full = func(plain, *args[1:], dtype=dtype, **rest)
    out = _laid_out_as(full, x)
    return out.requires_grad_() if kwargs.get("requires_grad") else out


def _in_place(func: Any, args: tuple, kwargs: dict) -> DTensor:
    x = args[0]
    rest = tuple(_whole(a) for a in args[1:])
    more = {k: _whole(v) for k, v in kwargs.items()}
    full = _full(x.shape, x.dtype, x.device, lambda t: func(t, *rest, **more))
    # as torch: a leaf that requires grad raises here unless under no_grad
    # (nn.init's case); otherwise the copy's gradient to x is zero, as the
    # random op's is
    return x.copy_(_laid_out_as(full, x))


def _whole(value: Any) -> Any:
    """A DTensor argument (``bernoulli_``'s ``p``) as the full value."""
    if isinstance(value, DTensor):
        return redistribute.redistribute_to(value, ((),) * value.ndim).to_local()
    return value


# the index of the ``inplace`` argument of the ops drawn on gathered operands
_INPLACE_INDEX = {F.alpha_dropout: 3, F.feature_alpha_dropout: 3, F.rrelu: 4}


# --- random="counter": per-block values from threefry --------------------------


def _key(generator: torch.Generator | None, device: torch.device) -> tuple[int, int]:
    """This call's threefry key: two 32-bit words drawn from ``generator``
    (if ``None``, torch's default one for ``device``, the operand's), once
    per call. Over simulated ranks
    the draw runs per rank, as any op: ``LocalTensorMode`` keeps a generator
    state per rank, and every rank's advances by the same one draw (the
    ranks hold the same seed, so the words agree: ``item`` checks it); an
    explicit ``generator`` is one object, drawn from once, outside them."""
    scope = maybe_disable_local_tensor_mode() if generator is not None else contextlib.nullcontext()
    with scope:
        words = torch.randint(0, 2 ** 32, (2,), dtype=torch.int64, generator=generator,
                              device=device if generator is None else generator.device)
    return int(words[0].item()), int(words[1].item())


def _contiguous_strides(shape: tuple) -> tuple:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def run_counter(func: Any, args: tuple, kwargs: dict) -> Any:
    """A call ``by_counter`` accepts, on DTensors or plain tensors, drawn
    from threefry: each element's value is a function of the call's key and
    its global index, so every layout -- and the plain tensor -- gets the
    same values, and a rank computes only its block."""
    x = args[0] if args else kwargs.get("tensor", kwargs.get("input"))
    if func in _FEATURE_DROPOUT and {F.dropout1d: 3, F.dropout3d: 5}.get(func) == x.ndim + 1:
        # unbatched, as F.dropoutNd: the batch dim added first
        inplace = bool(_arg(args, kwargs, 3, "inplace", False))
        out = run_counter(torch.feature_dropout, (x.unsqueeze(0), _arg(args, kwargs, 1, "p", 0.5),
                                                  True), {})
        return out.squeeze(0) if not inplace else x.copy_(out.squeeze(0))
    draw = _draw_of(func, args, kwargs, x)
    generator = None if func in _DROPOUT or func in _FEATURE_DROPOUT or func in _LIKE else (
        kwargs.get("generator"))
    key = _key(generator, x.device)
    dropout = func in _DROPOUT or func in _FEATURE_DROPOUT
    inplace = dropout and (func in (torch.dropout_, torch.feature_dropout_)
                           or bool(_arg(args, kwargs, 3, "inplace", False)))
    noise = _counter_values(x, draw, key, feature=func in _FEATURE_DROPOUT)
    if dropout:
        return x.mul_(noise) if inplace else x * noise
    if func in _LIKE:
        return noise.requires_grad_() if kwargs.get("requires_grad") else noise
    if func in _INIT:
        with torch.no_grad():  # as nn.init itself
            return x.copy_(noise)
    return x.copy_(noise)


def _draw_of(func: Any, args: tuple, kwargs: dict, x: Any) -> threefry.Draw:
    """What a counter call draws per element (``threefry.Draw``)."""
    if func in _DROPOUT or func in _FEATURE_DROPOUT:
        # torch's formula (0 or 1 / (1 - p)), kept where u < 1 - p (JAX's bernoulli)
        return threefry.Draw("dropout", x.dtype, p=float(_arg(args, kwargs, 1, "p", 0.5)))
    if func in _LIKE:
        dtype = kwargs.get("dtype") or x.dtype
        if func is torch.rand_like:
            return threefry.Draw("uniform", dtype)
        if func is torch.randn_like:
            return threefry.Draw("normal", dtype)
        # randint_like(x, high) or (x, low, high)
        ints = [a for a in args[1:3]] + [kwargs[k] for k in ("low", "high") if k in kwargs]
        low, high = (0, ints[0]) if len(ints) == 1 else (ints[0], ints[1])
        return threefry.Draw("integers", dtype, low=int(low), high=int(high))
    if func in (torch.Tensor.uniform_, torch.nn.init.uniform_):
        names = ("from", "to") if func is torch.Tensor.uniform_ else ("a", "b")
        return threefry.Draw("uniform", x.dtype, low=float(_arg(args, kwargs, 1, names[0], 0.0)),
                             high=float(_arg(args, kwargs, 2, names[1], 1.0)))
    if func in (torch.Tensor.normal_, torch.nn.init.normal_):
        return threefry.Draw("normal", x.dtype, mean=float(_arg(args, kwargs, 1, "mean", 0.0)),
                             std=float(_arg(args, kwargs, 2, "std", 1.0)))
    # bernoulli_ with a scalar p: JAX's bernoulli, u < p
    return threefry.Draw("bernoulli", x.dtype, p=float(_arg(args, kwargs, 1, "p", 0.5)))


def _counter_values(like: Any, draw: threefry.Draw, key: tuple[int, int],
                    feature: bool) -> torch.Tensor:
    """``draw``'s values at the global indices of ``like``'s elements (a
    feature dropout: one per ``(N, C)``, broadcast over the other dims):
    for a DTensor only this rank's block, a DTensor laid out as ``like``
    (per dim a range cut as that dim is -- a local slice of a replicated
    vector, no communication -- broadcast-summed: nothing of global size);
    for a plain tensor the whole tensor."""
    shape = tuple(like.shape)
    drawn = (shape[0], shape[1]) + (1,) * (len(shape) - 2) if feature else shape
    if isinstance(like, DTensor):
        mesh = like.device_mesh
        spec = S.spec_of(like)
        if feature:  # laid out as like's first two dims (the rest broadcast locally)
            spec = tuple(spec[:2]) + ((),) * (len(shape) - 2)
        per_dim = [S.placements_for((entry,), mesh) if entry else None for entry in spec]
        placements = tuple(like.placements) if feature else S.placements_for(spec, mesh)
        index = torch.zeros((), dtype=torch.int64, device=like.device)
        replicated = [Replicate()] * mesh.ndim
        for n, stride, cut in zip(drawn, _contiguous_strides(drawn), per_dim):
            vec = torch.arange(n, dtype=torch.int64, device=like.device) * stride
            if cut is not None:
                whole = DTensor.from_local(vec, mesh, replicated, run_check=False)
                vec = whole.redistribute(mesh, cut).to_local()
            index = index.unsqueeze(-1) + vec
    else:
        index = torch.arange(math.prod(drawn), dtype=torch.int64, device=like.device).view(drawn)
    local = threefry.values(draw, key, index)
    if not isinstance(like, DTensor):
        return local.expand(shape) if feature else local
    if feature:
        # like's placements (dims >= 2 broadcast locally), so that the product
        # and its gradient have like's layout
        return DTensor.from_local(local.expand_as(like.to_local()).contiguous(), mesh, placements,
                                  run_check=False, shape=like.shape, stride=like.stride())
    return DTensor.from_local(local, mesh, placements, run_check=False,
                              shape=torch.Size(shape), stride=_contiguous_strides(shape))
