"""``jax_semantics()``: the scope, and the ``TorchFunctionMode`` that runs
every op with a DTensor operand the way JAX would.

Why a function mode: DTensor's dispatch runs in C++ below autograd, so the
only place to act *above* autograd -- where a reshard is recorded and gets a
mirror collective in backward -- is ``__torch_function__``. Per op:

1. find the operands' mesh (two meshes: ``ShardingError``) and replicate
   plain tensors and numpy arrays on it (``operands``);
2. look up JAX's rule (``rules``): reshard operands with DTensor's
   differentiable ``redistribute`` so the op itself needs no communication;
   a leaf that requires grad always goes through ``redistribute`` so its
   gradient comes back with its own placement;
3. run the op, then complete pending reductions (``pending``) and lay each
   output out as JAX's rule says.
4. where DTensor refuses the op (no strategy, an output size that depends
   on the data, a plain tensor made inside a composite op) or its strategy
   is known to be wrong, take the fallback that always works
   (``fallback``: gather above autograd, compute on the full values);
   undefined gradients are made DTensors again (``grad_guard``).

Scoping: torch keeps its function-mode stack per thread, so the mode and the
scope's state are per thread too. Entering ``jax_semantics()`` pushes one
mode on this thread's stack if none of ours is there, else only pushes the
options; leaving pops them and removes the mode with the last one. The same
object may be entered again (re-entrant), nested with other options, and
used from several threads at once.

Under ``torch.compile`` dynamo traces this mode (rules and all) into the
graph, so the code here must not break the graph: a graph break inside
``_run`` makes one resume function serve every op, dynamo recompiles it for
each op's shapes and marks them dynamic, and AOTAutograd then fails on the
symbolic DTensor shapes (RecursionError in ``proxy_tensor._compute_proxy``).
Hence ``_name_of`` (a constant ``__name__``), ``is_leaf`` rather than
``grad_fn`` (which dynamo cannot read), and lists rather than generators in
``math.prod``.
"""

from __future__ import annotations

import threading
from typing import Any

import torch
from torch.distributed.tensor import DTensor
from torch.overrides import TorchFunctionMode

from parity.torch_impl.semantics import (
    backward_scope,
    compile_support,
    dtensor_errors,
    fallback,
    fast_path,
    grad_guard,
    local_ops,
    loss_parallel,
    operands,
    pending,
    rules,
    traced_plans,
    unreduced_ops,
    zero_tensor_grads,
)
from parity.torch_impl.collectives import gradient_buckets, redistribute
from parity.torch_impl.layouts import specs as S
from parity.torch_impl.runtime.torch_compat import tree_flatten, tree_unflatten
from parity.torch_impl.semantics import explicit_check, local_views, pending_clone
from parity.torch_impl.semantics import random as random_ops
from parity.errors import ParityError

# Names handled by torch itself: metadata, autograd plumbing, conversions
# that never compute on values.
_PASSTHROUGH = frozenset(
    """__get__ __set__ size dim ndimension stride numel nelement is_contiguous data_ptr
    __len__ __repr__ __format__ __hash__ __reduce_ex__ __deepcopy__ __setstate__
    requires_grad_ retain_grad register_hook register_post_accumulate_grad_hook backward
    element_size is_floating_point is_complex get_device storage_offset untyped_storage
    _is_view __dlpack__ __iter__ __contains__ device type dtype is_leaf
    detach_ set_ share_memory_ pin_memory __torch_function__""".split()
)
# Ops that look at values: a pending reduction must be completed first.
_OBSERVERS = frozenset("item tolist __bool__ __int__ __float__ numpy full_tensor".split())


class _State(threading.local):
    def __init__(self) -> None:
        self.options: list[dict] = []
        self.mode: _JaxSemanticsMode | None = None
        self.defer = False  # the innermost scope's option, read per op

    def set_options(self) -> None:
        self.defer = bool(self.options) and self.options[-1]["defer"]
        if self.mode is not None:  # the mode's copy, read per op (cheaper than a local's)
            self.mode.defer = self.defer


_state = _State()


def active() -> bool:
    """Whether this thread is inside ``jax_semantics()``."""
    return bool(_state.options)


def current_options() -> dict | None:
    return _state.options[-1] if _state.options else None


class JaxSemantics:
    """The context returned by ``jax_semantics()``; see there."""

    def __init__(self, defer: bool = False, random: str = "invariant") -> None:
        if random not in ("invariant", "counter", "per_rank"):
            raise ParityError(f"jax_semantics(random={random!r}): choose 'invariant' (every "
                              "rank draws the unsharded program's values), 'counter' (each "
                              "rank draws its block's values from a counter-based generator, "
                              "as JAX's threefry) or 'per_rank' (torch's own: each rank "
                              "draws for its block).")
        self.defer = bool(defer)
        self.random = random

    def __enter__(self) -> "JaxSemantics":
        _state.options.append({"defer": self.defer, "random": self.random})
        _state.set_options()
        if _state.mode is None:
            mode = _JaxSemanticsMode()
            mode.defer = _state.defer
            mode.__enter__()
            _state.mode = mode
            local_views.install(active)
            pending_clone.install(active)
        return self

    def __exit__(self, *exc: Any) -> None:
        if not _state.options:
            return
        _state.options.pop()
        _state.set_options()
        if not _state.options and _state.mode is not None:
            mode, _state.mode = _state.mode, None
            mode.__exit__(None, None, None)

    def __call__(self, fn):
        """Use as a decorator: ``fn`` runs under these semantics."""
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with JaxSemantics(self.defer, self.random):
                return fn(*args, **kwargs)

        return wrapper

    def __repr__(self) -> str:
        return f"jax_semantics(defer={self.defer}, random={self.random!r})"


def jax_semantics(defer: bool = False, random: str = "invariant") -> JaxSemantics:
    """A scope in which DTensor programs have JAX's semantics.

    ```python
    with torch_impl.simulate(8), torch_impl.jax_semantics():
        w = torch_impl.distribute_variable(np.ones((16, 8)), TensorLayout((None, "model"), mesh))
        y = torch.relu(x_host @ w - 1.0)        # host array: replicated input
        s = y.sum(0)                            # no Partial: reduced, spec ("model",)
        s.sum().backward()                      # w.grad has w's placement
    ```

    * plain tensors, numpy arrays and scalars meeting a DTensor are
      replicated on its mesh; DTensors on two meshes raise
      ``parity.ShardingError``;
    * every op's output has the spec JAX's explicit-mode rule gives (see
      ``parity.torch_impl.semantics.rules``) and no pending reduction; where
      JAX calls an op ambiguous, the reduction is completed and a result
      returned;
    * reshards happen above autograd, and every leaf's gradient has the
      leaf's placement.

    ``defer=True`` keeps a pending sum through linear ops (add, scalar mul,
    sum, reshapes, a matmul with a replicated operand) and completes it before
    any other op, ``describe``, ``to_numpy``, ``.item()`` and ``to_local()``.

    ``random="invariant"`` (default): random ops with a DTensor operand
    (dropout, ``rand_like``, ``bernoulli``, ``normal_``, attention's dropout,
    ...) draw the values the unsharded program draws after the same
    ``torch.manual_seed``, whatever the mesh and layout, as a JAX key does
    (``parity.torch_impl.semantics.random``); ``random="counter"``: dropout,
    ``rand_like``/``randn_like``/``randint_like``, ``uniform_``/``normal_``/
    ``bernoulli_`` draw each element from a key and its global index
    (threefry, as JAX): a rank computes only its block, and the same ops on
    plain tensors inside the scope draw the same way, so the unsharded
    program gives the same values (not plain torch's); ``random="per_rank"``
    opts out: each rank draws for its own block (torch's behaviour). Any
    other value raises ``parity.ParityError``.

    Nestable (the innermost options win), re-entrant, and per thread.
    """
    return JaxSemantics(defer, random)


# --- begin: unwrapping subclasses (issue 27, GPT-OSS; edited by the keras-hub helper) ---
def dispatch_unwrapped(func, args: tuple, kwargs: dict) -> Any:
    """``func(*args, **kwargs)`` as this thread's mode runs it, for a tensor
    subclass whose ``__torch_function__`` unwraps its operands and calls
    ``func`` again (Keras's torch ``Variable``, which holds a DTensor).

    torch pops the mode while it handles an op, so when the mode met the
    wrapper (``plain * variable``: no DTensor among its operands) and called
    ``func``, the subclass's unwrapped call would run without JAX's
    semantics: a plain tensor meeting the DTensor raised DTensor's mixed
    ``torch.Tensor and DTensor`` error. Outside ``jax_semantics()``: the
    plain call.
    """
    mode = _state.mode
    if mode is None:
        return func(*args, **kwargs)
    return mode.__torch_function__(func, (), tuple(args), kwargs)
# --- end: unwrapping subclasses ---


@torch.compiler.assume_constant_result
def _name_of(func) -> str | None:
    # Under torch.compile dynamo traces this mode; a function's ``__name__``
    # must be a constant there, or every string test on it breaks the graph.
    return getattr(func, "__name__", None)


_is_compiling = torch.compiler.is_compiling  # dynamo folds it (by identity) to True
_dynamo_compiling = torch.compiler.is_dynamo_compiling
_grad_enabled = torch.is_grad_enabled
_GRAD_ACCESS = (torch.Tensor.grad.__get__, torch.Tensor.grad.__set__)  # equal, never identical
_GRADS_PENDING = gradient_buckets.PENDING  # [n]: leaves whose gradient waits in a bucket


class _JaxSemanticsMode(TorchFunctionMode):
    defer = False  # this thread's innermost scope's option (_State.set_options)

    @compile_support.skip_alone  # inlined when traced, never compiled op by op
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if not _is_compiling():
            if _GRADS_PENDING[0] and func in _GRAD_ACCESS:  # x.grad while a bucket waits
                gradient_buckets.flush_pending(args[0])
            # Eager: a call proven clean (fast_path) or a passthrough, run
            # directly (neither holds a backward entry point, see _eager). Ops
            # on one or two DTensors build fast_path.signature's tuple inline
            # (a Python call costs ~1 us here; roles as fast_path.grad_role).
            if not kwargs:
                n = len(args)
                if n == 2:
                    x, y = args
                    if type(x) is DTensor and type(y) is DTensor:
                        if _grad_enabled():
                            key = (func, True, self.defer, x._spec,
                                   (2 if x.is_leaf else 1) if x.requires_grad else 0,
                                   y._spec, (2 if y.is_leaf else 1) if y.requires_grad else 0)
                        else:
                            key = (func, False, self.defer, x._spec, 0, y._spec, 0)
                        if key in fast_path.CLEAN or func in fast_path.DIRECT:
                            return func(x, y)
                        return _eager(func, args, {}, key)
                elif n == 1:
                    x = args[0]
                    if type(x) is DTensor:
                        if _grad_enabled():
                            key = (func, True, self.defer, x._spec,
                                   (2 if x.is_leaf else 1) if x.requires_grad else 0)
                        else:
                            key = (func, False, self.defer, x._spec, 0)
                        if key in fast_path.CLEAN or func in fast_path.DIRECT:
                            return func(x)
                        return _eager(func, args, {}, key)
            if func in fast_path.DIRECT:
                return func(*args, **kwargs) if kwargs else func(*args)
            key = fast_path.signature(func, args, kwargs, self.defer)
            if key is not None and key in fast_path.CLEAN:
                return func(*args, **kwargs) if kwargs else func(*args)
            return _eager(func, args, kwargs or {}, key)
        kwargs = kwargs or {}
        if compile_support.runs_untraced(func):  # backward: never traced by dynamo
            return _backward(func, args, kwargs)
        name = _name_of(func)
        if name in _PASSTHROUGH and not _ruled_property(name, func):
            return func(*args, **kwargs)
        mesh, rehome = operands.find_mesh(args, kwargs)
        if mesh is None:
            return _plain(func, args, kwargs)
        return _run(func, name or "", args, kwargs, mesh, None, rehome)


def _eager(func, args: tuple, kwargs: dict, key: tuple | None) -> Any:
    """An eager call that is not known clean: the whole rule."""
    if compile_support.runs_untraced(func):  # backward: never traced by dynamo
        return _backward(func, args, kwargs)
    name = getattr(func, "__name__", None)
    if name in _PASSTHROUGH and not _ruled_property(name, func):
        fast_path.remember_direct(func)
        return func(*args, **kwargs)
    mesh, rehome = operands.find_mesh(args, kwargs)
    if mesh is None:
        return _plain(func, args, kwargs)
    return _run(func, name or "", args, kwargs, mesh, key, rehome)


def _plain(func, args: tuple, kwargs: dict) -> Any:
    """A call without DTensors. Under ``random="counter"`` a random op on
    plain tensors draws from the same counter generator as on DTensors
    (issue 25: the unsharded program's values are the sharded one's)."""
    if (random_ops.listed(func) and _state.options[-1]["random"] == "counter"
            and random_ops.by_counter(func, args, kwargs)):
        return random_ops.run_counter(func, args, kwargs)
    return func(*args, **kwargs)


def _backward(func, args: tuple, kwargs: dict) -> Any:
    """A backward entry point (``Tensor.backward``, ``autograd.backward``,
    ``autograd.grad``) run with this thread's mode pushed again.

    torch pops a function mode while its ``__torch_function__`` runs, so a
    backward started under ``jax_semantics()`` would run every Python-level
    op inside it -- activation checkpointing's recompute, a custom
    Function's backward, a tensor hook -- without JAX's semantics (the
    recompute then differs from the forward: ``CheckpointError``, or DTensor
    lacks a strategy the forward's fallback avoided). DTensor's own backward
    kernels run below autograd and never see the mode.
    """
    mode = _state.mode
    if mode is None or not backward_scope.covered(func, args, kwargs):
        return backward_scope.run_uncovered(func, args, kwargs)
    return backward_scope.run_untraced(mode, func, args, kwargs)


def _ruled_property(name: str | None, func) -> bool:
    # ``x.T``, ``x.mT``, ``x.H``, ``x.mH`` compute (a transpose): they have
    # rules, so that the leaf's gradient comes back with its placement.
    return name == "__get__" and rules.covers(func)


def _defer() -> bool:
    return _state.defer


def _run(func, name: str, args: tuple, kwargs: dict, mesh, key: tuple | None = None,
         rehomed: bool = False) -> Any:
    defer = _defer()
    if name == "__array_wrap__":
        return operands.wrap_numpy_result(args[0], kwargs.get("array", args[-1]))
    if operands.needs_promotion(args, kwargs):
        if operands.writes_gradient_into_plain(name, args, kwargs):
            return operands.write_into_plain(func, args, kwargs)
        args, kwargs = operands.promote(args, kwargs, mesh)
    if rehomed:  # the same mesh as another object (an FSDP2 submesh): one mesh
        args, kwargs = operands.rehome(args, kwargs, mesh)
    if loss_parallel.applies(func):  # the user asked for DTensor's own parallel loss
        args, kwargs = _map_dtensors(args, kwargs, lambda loc, t: pending.complete(t))
        return func(*args, **kwargs)
    if name == "__array__":
        # np.asarray(x), and numpy's side of ``x * ndarray`` (torch's operator
        # gives up on an ndarray before any __torch_function__): the global
        # array, as np.asarray does on a jax.Array.
        from parity.torch_impl.arrays.distribute import to_numpy

        array = to_numpy(args[0])
        dtype = args[1] if len(args) > 1 else kwargs.get("dtype")
        return array if dtype is None else array.astype(dtype)
    if name in _OBSERVERS:
        args, kwargs = _map_dtensors(args, kwargs, lambda loc, t: pending.complete(t))
        return func(*args, **kwargs)
    if unreduced_ops.involved(args, kwargs):  # a typed pending sum (P(unreduced=)): JAX's rules
        return unreduced_ops.run(func, name, args, kwargs)
    if random_ops.draws(func, args, kwargs) and _state.options[-1]["random"] != "per_rank":
        return random_ops.run(func, args, kwargs, mesh,  # the unsharded program's values
                              counter=_state.options[-1]["random"] == "counter")
    original = func  # sgn of a real tensor runs as sign: its ZeroTensor gradient crashed
    func = zero_tensor_grads.replacement(func, args, kwargs)  # simulated ranks (torch #108983)
    grad = torch.is_grad_enabled()
    if _dynamo_compiling():  # the whole decision made outside dynamo's trace
        decided = traced_plans.decision_for(func, args, kwargs, mesh, defer, grad)
        if decided is not None:
            return _run_decided(func, name, args, kwargs, mesh, grad, decided)
    plan = traced_plans.plan_for(func, args, kwargs, mesh)  # rules.plan_for; outside dynamo's trace
    if plan is not None and plan.chosen:  # JAX's explicit mode refuses it: on Explicit axes, raise
        explicit_check.refuse_if_explicit(func, name, plan, args, kwargs, mesh)
    keep_partial = defer and plan is not None and plan.linear
    targets = plan.inputs if plan is not None else {}

    moved = []  # operands the rule changed: the call is not clean

    def prepare(loc, t: DTensor) -> DTensor:
        spec = targets.get(loc)
        partial = S.has_partial(t)
        if partial and not keep_partial:
            t = pending.complete(t)
            partial = False
            moved.append(loc)  # a pending operand: the call is never clean
        guard = grad and t.requires_grad and t.is_leaf  # not grad_fn: dynamo
        if spec is None or partial:
            out = redistribute.redistribute_to(t, S.spec_of(t), guard=True) if guard else t
        else:
            out = redistribute.redistribute_to(t, spec, guard=guard)
        if out is not t or partial:
            moved.append(loc)
            if grad and out.requires_grad and not torch.compiler.is_compiling():
                out = grad_guard.guard(out)
        return out

    prepared_args, prepared_kwargs = _map_dtensors(args, kwargs, prepare)
    out, direct = _compute(func, name, prepared_args, prepared_kwargs, mesh, grad)
    result = _finish(out, plan, keep_partial)
    if (direct and key is not None and not moved and not rehomed and result is out
            and not _any_partial(out) and not (plan is not None and plan.chosen)
            and not random_ops.listed(func) and func is original):  # chosen: re-checked per
        # mesh; random: per option; a replaced op: the fast path would run the original
        fast_path.remember(key)
    return result


def _run_decided(func, name: str, args: tuple, kwargs: dict, mesh, grad: bool,
                 decided: tuple) -> Any:
    """``_run``'s rest under dynamo, for a call ``traced_plans.decision_for``
    decided outside the trace: dynamo traces the completions, redistributes
    and the op that ``decided`` names, not the Python that chose them
    (eagerly ``_run`` decides per call, and the fast path skips it)."""
    plan, actions, keep_partial = decided
    if plan is not None and plan[3]:  # chosen: on Explicit axes JAX refuses it
        explicit_check.refuse_if_explicit(func, name, rules.Plan(dict(plan[0]), plan[1], plan[2],
                                                                 plan[3]), args, kwargs, mesh)
    visits = [0]

    def prepare(loc, t: DTensor) -> DTensor:
        complete, spec, guard = actions[visits[0]]
        visits[0] += 1
        if complete:
            t = pending.complete(t)
        return t if spec is None else redistribute.redistribute_to(t, spec, guard=guard)

    prepared_args, prepared_kwargs = _map_dtensors(args, kwargs, prepare)
    out, _ = _compute(func, name, prepared_args, prepared_kwargs, mesh, grad)
    return _finish_decided(out, plan[1] if plan is not None else None, keep_partial)


def _compute(func, name: str, args: tuple, kwargs: dict, mesh, grad: bool) -> tuple[Any, bool]:
    """``(out, direct)``: the op on its prepared operands -- each rank's
    block (``local_ops``), the fallback where DTensor's strategy is wrong or
    missing, else DTensor itself (``direct``), recovering where DTensor
    refuses (``_recover``). Raises what the op raises."""
    if name in local_ops.LOCAL_REDUCTIONS:
        out = local_ops.run_local_reduction(func, args, kwargs)
        if out is not None:
            return out, False
    if fallback.refused(func):
        fallback.refuse(func, args, kwargs)
    if fallback.known_wrong(func) or (
            grad and fallback.backward_missing(func) and _needs_grad(args, kwargs)):
        # DTensor's strategy is wrong for some placements (fallback.KNOWN_WRONG),
        # or it has none for the backward (fallback.BACKWARD_MISSING)
        return fallback.run_replicated(func, args, kwargs, mesh,
                                       "DTensor's strategy for it is wrong"), False
    try:
        return func(*args, **kwargs), True
    except (NotImplementedError, RuntimeError) as err:
        return _recover(err, func, args, kwargs, mesh), False


def _recover(err: Exception, func, args: tuple, kwargs: dict, mesh) -> Any:
    """The op's result after DTensor refused it with ``err`` (see
    ``fallback`` for the policy); ``err`` itself when it is a genuine error."""
    found = dtensor_errors.kind(err)
    if found is None:
        raise err
    if found == "mixed":
        return fallback.run_implicit(func, args, kwargs, mesh)
    if found == "placements":
        # No strategy for these placements (a strided shard, a view of a
        # sharded dim): gather the operands above autograd and run again.
        args, kwargs = _map_dtensors(args, kwargs,
                                     lambda loc, t: redistribute.redistribute_to(t, ((),) * t.ndim))
        try:
            return func(*args, **kwargs)
        except (NotImplementedError, RuntimeError) as again:
            if dtensor_errors.kind(again) is None:
                raise
    return fallback.run_replicated(func, args, kwargs, mesh, "DTensor has no strategy for it")


def _needs_grad(args: tuple, kwargs: dict) -> bool:
    leaves, _ = tree_flatten((args, kwargs))
    return any(isinstance(t, DTensor) and t.requires_grad for t in leaves)


def _any_partial(out: Any) -> bool:
    leaves, _ = tree_flatten(out)
    return any(isinstance(t, DTensor) and S.has_partial(t) for t in leaves)


def _map_dtensors(args: tuple, kwargs: dict, fn) -> tuple[tuple, dict]:
    def one(loc, value):
        if isinstance(value, DTensor):
            return fn(loc, value)
        if isinstance(value, (list, tuple)) and any(isinstance(v, DTensor) for v in value):
            return type(value)(
                fn(loc + (j,), v) if isinstance(v, DTensor) else v for j, v in enumerate(value)
            )
        return value

    return (
        tuple(one(("a", i), a) for i, a in enumerate(args)),
        {k: one(("k", k), v) for k, v in kwargs.items()},
    )


def _finish(out: Any, plan, keep_partial: bool) -> Any:
    if (isinstance(out, DTensor) and plan is None and not S.has_partial(out)
            and not S.has_strided(out)):
        return out
    leaves, tree = tree_flatten(out)
    tensors = [i for i, leaf in enumerate(leaves) if isinstance(leaf, DTensor)]
    if not tensors:
        return out
    wanted = None
    if plan is not None and plan.outputs is not None:
        outs = [leaves[i] for i in tensors]
        wanted = plan.outputs(outs) if callable(plan.outputs) else plan.outputs
    changed = False
    for k, i in enumerate(tensors):
        t = leaves[i]
        spec = wanted[k] if wanted is not None and k < len(wanted) else None
        if keep_partial and S.has_partial(t):
            leaves[i] = pending.mark_deferred(t)
            changed = True
            continue
        if spec is None or len(spec) != t.ndim:
            if S.has_partial(t) or not S.describable(t):
                leaves[i] = pending.complete(S.without_strided(t))
                changed = True
            continue
        if S.placements_for(spec, t.device_mesh) != tuple(t.placements):
            leaves[i] = redistribute.redistribute_to(t, spec)
            changed = True
    return tree_unflatten(leaves, tree) if changed else out


def _finish_decided(out: Any, outputs: tuple | None, keep_partial: bool) -> Any:
    """``_finish`` under dynamo: each output's action decided outside the
    trace (``traced_plans.output_action``) from its placements and the spec
    the plan gives it (``outputs``, or ``None``)."""
    if isinstance(out, DTensor):
        leaves, tree = [out], None
    else:
        leaves, tree = tree_flatten(out)
    changed = False
    k = 0
    for i in range(len(leaves)):
        t = leaves[i]
        if not isinstance(t, DTensor):
            continue
        spec = outputs[k] if outputs is not None and k < len(outputs) else None
        k += 1
        kind, target = traced_plans.output_action(t, spec, keep_partial)
        if kind == "keep":
            continue
        if kind == "defer":
            leaves[i] = pending.mark_deferred(t)
        elif kind == "complete":
            leaves[i] = pending.complete(S.without_strided(t))
        else:
            leaves[i] = redistribute.redistribute_to(t, target)
        changed = True
    if not changed:
        return out
    return leaves[0] if tree is None else tree_unflatten(leaves, tree)
