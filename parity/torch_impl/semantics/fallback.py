"""The fallback that always works, and when the mode takes it.

Policy (``jax_semantics()``'s contract for an op with a DTensor operand):
the result equals the op on the unsharded tensors, with JAX's placement
where a rule exists (``rules``) and a replicated one otherwise -- or a
``parity.UnsupportedOpError`` naming the op, the operands' placements and
why. Never a wrong value, never DTensor's own stack trace for an op torch
itself can run. The fallback is what JAX's partitioner does at worst:

* ``run_replicated``: every DTensor operand is gathered above autograd
  (differentiably, in one all_gather over the flattened group of the mesh
  axes that shard it: ``collectives.gather``), the op runs on each rank's
  full copy (``to_local`` / ``from_local``, both differentiable, so the
  gradient flows back and each input's gradient has that input's
  placement), and its tensor results come back replicated (the mode then
  lays them out as the op's rule says, if it has one).
* ``run_implicit``: composite ops that create plain tensors inside
  (``scaled_dot_product_attention``, ``linalg.matrix_power``,
  ``slice_scatter``, ``diagonal_scatter``, ``vander``, ``combinations``)
  run once more with DTensor's ``implicit_replication()`` scoped to that
  one call; if that fails too, ``run_replicated``.

When (``compute.compute``: ``before_dtensor``, then DTensor, then
``recover`` with the kind of DTensor's refusal):

1. the op is on ``KNOWN_WRONG`` below: DTensor has a strategy that gives a
   wrong value or gradient for some placements -> ``run_replicated``
   before DTensor sees it; likewise an op on ``BACKWARD_MISSING`` (DTensor
   has no strategy for its backward: pooling, hardshrink/hardtanh/relu6,
   logsigmoid, prelu, take, ...) when an operand requires grad;
2. DTensor has no strategy for these placements (``dtensor_errors``:
   ``placements``) -> the operands are gathered and DTensor runs the op;
3. DTensor has no strategy at all, or cannot propagate shardings (an output
   size that depends on the data: ``masked_select``, ``nonzero``, ...)
   (``dtensor_errors``: ``no-strategy``) -> ``run_replicated``;
4. a plain tensor made inside the op met a DTensor (``mixed``) ->
   ``run_implicit``.

Ops on ``REFUSED`` (``to_sparse*``: a DTensor is dense) raise
``UnsupportedOpError``. ``segment_reduce`` (JAX: ``jax.ops.segment_sum`` /
``segment_max``) has no DTensor strategy: it runs on the gathered operands
(``run_replicated``), its result replicated.
In-place ops and ``out=`` on a sharded operand are refused in the fallback
(``UnsupportedOpError``): the full copy it computes on is not the operand's
storage. Their out-of-place forms work.

Known-wrong strategies (torch 2.13), with what goes wrong:

| op                                   | placements       | DTensor gives                 |
|--------------------------------------|------------------|-------------------------------|
| ``linalg.eig``, ``linalg.eigvals``   | sharded batch    | NaN gradient                  |
| (gradient)                           |                  |                               |
| ``quantile``, ``nanquantile``        | sharded input    | output shape [1] for a 0-d q  |
| ``histc``                            | sharded input    | wrong shape (bins=1)          |
| ``mse_loss``, ``smooth_l1_loss``,    | sharded input    | wrong gradient                |
| ``soft_margin_loss``,                |                  |                               |
| ``binary_cross_entropy`` (gradient)  |                  |                               |
| ``cosine_embedding_loss``            | sharded features | wrong values                  |
| ``slice_scatter``, ``select_scatter``| any sharded      | backward: "got mixed          |
| ``diagonal_scatter``,                |                  | torch.Tensor and DTensor"     |
| ``as_strided_scatter`` (gradient)    |                  | (plain zeros made inside)     |
| ``squeeze_copy``                     | a dim after the  | placements of a dim the       |
|                                      | squeezed one     | output does not have          |
| ``kron``                             | a dim split over | strided placements no         |
|                                      | two mesh axes    | ``PartitionSpec`` describes   |
| ``fft.hfftn``, ``fft.hfft2``         | sharded input    | MKL error on the blocks       |
| conv family (``conv*d``,             | sharded spatial  | wrong shape/values; backward  |
| ``conv_transpose*d``)                | dim or weight    | "Stride must be 1 ..." -- the |
|                                      |                  | conv rule gathers those dims  |
| ``amax``/``amin``/``max``/``min``    | reduced dim      | gradient inf/NaN when the max |
| (gradient)                           | sharded          | is not in the first shard --  |
|                                      |                  | the reduction rule gathers    |
|                                      |                  | the reduced dims under grad   |
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor, Replicate
from torch.distributed.tensor.experimental import implicit_replication

from parity import sharding_rules as R
from parity.errors import UnsupportedOpError
from parity.torch_impl.runtime.torch_compat import tree_map
from parity.torch_impl.runtime.rank_results import first_rank_value
from parity.torch_impl.semantics import dtensor_errors, pending
from parity.torch_impl.collectives import flat_groups, gather, redistribute
from parity.torch_impl.layouts import specs as S
from parity.torch_impl.semantics.rules.registry import torch_ops

# Ops whose DTensor strategy gives wrong values for some placements: always
# computed on the gathered operands.
KNOWN_WRONG = frozenset({
    torch.linalg.eig, torch.linalg.eigvals,
    # wrong output shape for some samples (a 0-d q, bins=1)
    torch.quantile, torch.Tensor.quantile, torch.nanquantile, torch.Tensor.nanquantile,
    torch.histc, torch.Tensor.histc,
    # wrong gradient (losses) or values (cosine_embedding_loss over a sharded feature dim)
    F.mse_loss, torch._C._nn.mse_loss, F.smooth_l1_loss, torch._C._nn.smooth_l1_loss,
    F.soft_margin_loss, torch._C._nn.soft_margin_loss, F.binary_cross_entropy,
    torch._C._nn.binary_cross_entropy, F.cosine_embedding_loss, torch.cosine_embedding_loss,
    # backward makes plain zeros that meet the DTensor gradient
    torch.slice_scatter, torch.Tensor.slice_scatter, torch.diagonal_scatter,
    torch.Tensor.diagonal_scatter, torch.select_scatter, torch.Tensor.select_scatter,
    torch.as_strided_scatter, torch.Tensor.as_strided_scatter,
    # an output whose placements name a dim it does not have (Shard(2) of a 2-d result)
    torch.squeeze_copy,
    # composite (reshapes inside): strided placements that no PartitionSpec describes
    torch.kron,
    # MKL "Inconsistent configuration parameters" on the blocks of a sharded input
    torch.fft.hfftn, torch.fft.hfft2,
})


# Ops whose *backward* DTensor has no strategy for (it fails in backward,
# where no mode reaches): computed on the gathered operands when a gradient
# is needed.
BACKWARD_MISSING = frozenset(
    [fn for fn, _ in torch_ops(
        "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
        "adaptive_max_pool2d", "adaptive_max_pool3d", "adaptive_max_pool1d_with_indices",
        "adaptive_max_pool2d_with_indices", "adaptive_max_pool3d_with_indices",
        "_adaptive_max_pool1d", "_adaptive_max_pool2d", "_adaptive_max_pool3d", "max_pool3d",
        "max_pool3d_with_indices", "_max_pool3d", "hardshrink", "hardsigmoid", "hardswish",
        "hardtanh", "local_response_norm", "logsigmoid", "log_sigmoid", "relu6", "softshrink",
        "multilabel_soft_margin_loss", "prelu", "ormqr", "take", "native_group_norm",
        "group_norm",
        # backward makes plain tensors that meet the DTensor gradient
        "cummax", "cummin", "index_put", "trace", "cumprod", "svd_lowrank", "pca_lowrank",
        # backward reshapes a dim DTensor cannot split (uneven, or strided placements)
        "multi_head_attention_forward", "repeat_interleave")]
    + [torch.linalg.householder_product, torch.linalg.vander]
)

# Ops parity refuses: UnsupportedOpError, never a value. (segment_reduce was
# here: OpInfo's samples rescaled to shardable lengths keep their offsets /
# lengths, which then point past the data, so the op read uninitialised
# memory -- on plain tensors too; on valid segments it is exact.)
_SPARSE = frozenset({torch.Tensor.to_sparse, torch.Tensor.to_sparse_csr,
                     torch.Tensor.to_sparse_csc, torch.Tensor.to_sparse_coo,
                     torch.Tensor.to_sparse_bsr, torch.Tensor.to_sparse_bsc})
# Sparse layouts: a DTensor holds dense blocks only, and JAX's sharded arrays
# are dense (DTensor fails inside with "Could not run 'aten::view' with
# arguments from the 'SparseCPU' backend").
REFUSED = _SPARSE

# Ops whose gradient parity refuses (UnsupportedOpError): as_strided's
# backward is defined on the operand's storage geometry, which the gathered
# copy the fallback computes on does not share (over simulated ranks it came
# back divided by the number of ranks). The forward runs on the gathered copy.
GRAD_REFUSED = frozenset({torch.as_strided, torch.Tensor.as_strided})


@torch.compiler.assume_constant_result
def refused(func: Any) -> bool:
    """Whether parity refuses ``func`` on DTensors (``REFUSED``)."""
    return func in REFUSED


def refuse(func: Any, args: tuple, kwargs: dict) -> None:
    """Raise the ``UnsupportedOpError`` for a ``REFUSED`` op (a sparse
    layout: a distributed tensor is dense, as JAX's sharded arrays are)."""
    placements = _placements(args, kwargs)
    raise UnsupportedOpError(
        f"{op_name(func)} on DTensors (placements {placements}) is not supported: a "
        "distributed tensor is dense (as JAX's sharded arrays are). Gather it first "
        "(to_numpy / full_tensor) and make the plain tensor sparse.",
        op=op_name(func), placements=placements, reason="sparse layout",
    )


@torch.compiler.assume_constant_result
def backward_missing(func: Any) -> bool:
    """Whether DTensor cannot run ``func``'s backward (``BACKWARD_MISSING``)."""
    return func in BACKWARD_MISSING


@torch.compiler.assume_constant_result
def known_wrong(func: Any) -> bool:
    """Whether ``func`` is on ``KNOWN_WRONG`` (a constant under dynamo)."""
    return func in KNOWN_WRONG


def op_name(func: Any) -> str:
    """A readable name of a torch callable for messages."""
    qual = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    module = getattr(func, "__module__", None) or ""
    return f"{module}.{qual}" if module and not qual.startswith(module) else qual


def _placements(args: tuple, kwargs: dict) -> tuple:
    found = []

    def note(value):
        if isinstance(value, DTensor):
            found.append(tuple(value.placements))
        return value

    tree_map(note, (args, kwargs))
    return tuple(found)


def _needs_grad(args: tuple, kwargs: dict) -> bool:
    found = []
    tree_map(lambda v: found.append(v) if isinstance(v, DTensor) and v.requires_grad else None,
             (args, kwargs))
    return bool(found)


@torch.compiler.assume_constant_result
def inplace_by_name(func: Any) -> bool:
    """Whether ``func`` writes into its first operand (``add_``, ``__iadd__``)."""
    # a constant under dynamo, which cannot trace str.endswith on the name
    name = getattr(func, "__name__", "") or ""
    return (name.endswith("_") and not name.endswith("__")) or name.startswith("__i")


def _refuse_inplace(func: Any, args: tuple, kwargs: dict, why: str) -> None:
    inplace = inplace_by_name(func)
    target = args[0] if args else None
    if "out" in kwargs and kwargs["out"] is not None:
        inplace, target = True, kwargs["out"]
    if not inplace:
        return
    if isinstance(target, DTensor) and all(isinstance(p, Replicate) for p in target.placements):
        return  # the full copy is the operand's own storage
    placements = _placements(args, kwargs)
    raise UnsupportedOpError(
        f"{op_name(func)} writes into a sharded operand (placements {placements}) and {why}; "
        "parity would have to compute on a gathered copy, which is not the operand. Use the "
        "out-of-place form (e.g. y = x.op(...) instead of x.op_(...)).",
        op=op_name(func), placements=placements, reason=why,
    )


def _whole(value: DTensor) -> DTensor:
    """``value`` (no pending sum) replicated, differentiably, through one
    all_gather over the flattened group of the mesh axes that shard it --
    also for a dim split over axes out of mesh order (a strided shard), which
    DTensor's redistribute gathers one mesh axis at a time and says so in the
    user's log. Under dynamo (which cannot create a flattened mesh) DTensor's
    redistribute."""
    if all(isinstance(p, Replicate) for p in value.placements):
        return value
    if torch.compiler.is_dynamo_compiling():
        return redistribute.redistribute_to(value, ((),) * value.ndim)
    return gather.all_gather_variable(value)


def run_replicated(func: Any, args: tuple, kwargs: dict, mesh, why: str) -> Any:
    """``func`` on every rank's full copy of its DTensor operands; tensor
    results replicated DTensors on ``mesh``. Differentiable. ``why`` (for
    the in-place refusal) says why the fallback runs."""
    _refuse_inplace(func, args, kwargs, why)
    if func in GRAD_REFUSED and torch.is_grad_enabled() and _needs_grad(args, kwargs):
        placements = _placements(args, kwargs)
        raise UnsupportedOpError(
            f"the gradient of {op_name(func)} on DTensors (placements {placements}) is not "
            "supported: it depends on the operand's storage layout, which a sharded operand "
            "does not have. Run it without a gradient, or on plain tensors.",
            op=op_name(func), placements=placements, reason="gradient depends on storage layout",
        )

    def local(value):
        if isinstance(value, DTensor):
            full = _whole(pending.complete(value)).to_local()
            # contiguous, as DTensor's gather gives it: the one all_gather's
            # blocks are put in place by a permute, and ops that view their
            # operand (kron) refuse a permuted one
            return full if full.is_contiguous() else full.contiguous()
        return value

    def index_like(value):
        # an integer operand after the first (indices, sections): one plain
        # copy, since ops read such values on the host (tensor_split), which
        # simulated ranks' LocalTensor cannot give; every rank holds the same
        full = local(value)
        if isinstance(value, DTensor) and not (full.is_floating_point() or full.is_complex()):
            return first_rank_value(full)
        return full

    first = (tree_map(local, args[0]),) if args else ()
    out = func(*first, *tree_map(index_like, args[1:]),
               **tree_map(index_like, kwargs))

    def wrap(value):
        if isinstance(value, torch.Tensor) and not isinstance(value, DTensor):
            return DTensor.from_local(value, mesh, [Replicate()] * mesh.ndim, run_check=False,
                                      shape=value.shape, stride=value.stride())
        return value

    return tree_map(wrap, out)


def run_gathered_random(func: Any, args: tuple, kwargs: dict, mesh,
                        inplace_at: int | None) -> Any:
    """A random op that ``random.run`` draws on the gathered operands (the
    alpha dropouts, ``rrelu``, fractional pooling, attention's dropout,
    ``bernoulli``...): ``run_replicated`` -- torch's generator called once
    for the global shape, as the unsharded program calls it -- each result
    then laid out as the first DTensor operand's spec fitted to its shape
    (attention: the query's batch and head dims). ``inplace_at``: the index
    of an ``inplace=True`` argument; the op then runs out of place on the
    gathered copy and is written into the operand's own blocks (the
    gathered copy is not its storage)."""
    if inplace_at is not None:
        args = tuple(False if i == inplace_at else a for i, a in enumerate(args))
        kwargs = {**kwargs, "inplace": False} if "inplace" in kwargs else kwargs
        return args[0].copy_(run_gathered_random(func, args, kwargs, mesh, None))
    out = run_replicated(func, args, kwargs, mesh, "a random op")
    first = next(a for a in list(args) + list(kwargs.values()) if isinstance(a, DTensor))
    spec = S.spec_of(first)
    if func is F.scaled_dot_product_attention:
        spec = tuple(spec[:2]) + ((),) * (len(spec) - 2)  # batch and heads, as attention
    sizes = S.axis_sizes(mesh)

    def lay_out(value):
        if isinstance(value, DTensor) and value.ndim == len(spec):
            return redistribute.redistribute_to(value, R.fit_to_shape(spec, value.shape, sizes))
        return value

    return tuple(lay_out(v) for v in out) if isinstance(out, tuple) else lay_out(out)


def run_implicit(func: Any, args: tuple, kwargs: dict, mesh) -> Any:
    """``func`` with plain tensors it creates inside treated as replicated
    (DTensor's ``implicit_replication()``, scoped to this call); where
    DTensor still refuses, ``run_replicated``. DTensor's dispatch then lays
    the operands out as its strategy needs: with the mesh's flattened meshes
    registered (no strided shard around), in one collective per change
    rather than one per mesh axis."""
    try:
        with implicit_replication(), flat_groups.merging(mesh, (args, kwargs)):
            return func(*args, **kwargs)
    except (NotImplementedError, RuntimeError) as err:
        if dtensor_errors.kind(err) is None:
            raise
    return run_replicated(func, args, kwargs, mesh, "DTensor cannot run it on these placements")


def before_dtensor(func: Any, args: tuple, kwargs: dict, grad: bool) -> bool:
    """Whether ``func`` must run on the gathered operands before DTensor
    sees it: on ``KNOWN_WRONG``, or on ``BACKWARD_MISSING`` with an operand
    that needs a gradient (``grad``: autograd records). Raises
    ``UnsupportedOpError`` for an op on ``REFUSED``."""
    if refused(func):
        refuse(func, args, kwargs)
    return known_wrong(func) or (grad and backward_missing(func) and _needs_grad(args, kwargs))


def recover(err: Exception, func: Any, args: tuple, kwargs: dict, mesh) -> Any:
    """The op's result after DTensor refused it with ``err``, by the kind of
    refusal (``dtensor_errors.kind``; policy in the module docstring):
    ``mixed`` -> ``run_implicit``; ``placements`` -> the operands gathered
    and DTensor again (``run_replicated`` if it still refuses); any other ->
    ``run_replicated``. Raises ``err`` itself when it is a genuine error."""
    found = dtensor_errors.kind(err)
    if found is None:
        raise err
    return _RECOVERIES.get(found, _no_strategy)(func, args, kwargs, mesh)


def _gathered_again(func: Any, args: tuple, kwargs: dict, mesh) -> Any:
    """No strategy for these placements (a strided shard, a view of a
    sharded dim): the operands gathered above autograd and DTensor again."""
    def whole(value):
        if isinstance(value, DTensor):
            return redistribute.redistribute_to(value, ((),) * value.ndim)
        return value

    args, kwargs = tree_map(whole, (args, kwargs))
    try:
        return func(*args, **kwargs)
    except (NotImplementedError, RuntimeError) as again:
        if dtensor_errors.kind(again) is None:
            raise
    return _no_strategy(func, args, kwargs, mesh)


def _no_strategy(func: Any, args: tuple, kwargs: dict, mesh) -> Any:
    return run_replicated(func, args, kwargs, mesh, "DTensor has no strategy for it")


# DTensor's refusal kind -> how the op runs instead (others: _no_strategy)
_RECOVERIES = {"mixed": run_implicit, "placements": _gathered_again}
