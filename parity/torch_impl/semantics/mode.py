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
    compute,
    decision,
    fallback,
    fast_path,
    loss_parallel,
    numpy_interop,
    operands,
    pending,
    reshard,
    rules,
    unreduced,
    zero_tensor_grads,
)
from parity.torch_impl.collectives import compiled_buckets, gradient_buckets, redistribute
from parity.torch_impl.layouts import specs as S
from parity.torch_impl.runtime.torch_compat import (
    function_mode_count,
    function_mode_stack,
    tree_flatten,
    tree_unflatten,
)
from parity.torch_impl.semantics import dtensor_handlers, explicit_check, local_views, pending_clone
from parity.torch_impl.semantics import foreach
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
        self.undo_inductor_buckets = lambda: None  # compiled_buckets.inductor_buckets's undo

    def set_options(self) -> None:
        self.defer = bool(self.options) and self.options[-1]["defer"]
        if self.mode is not None:  # the mode's copy, read per op (cheaper than a local's)
            self.mode.defer = self.defer
            self.mode.scope_options = self.options[-1] if self.options else None


_state = _State()


def active() -> bool:
    """Whether this thread is inside ``jax_semantics()``: its own scope, or
    the mode carried to a thread torch runs part of a scope's work on
    (``_on_carried_thread``)."""
    if _state.options:
        return True
    if not function_mode_count():  # no function mode at all: one C call
        return False
    return any(isinstance(m, _JaxSemanticsMode) for m in function_mode_stack())


def current_options() -> dict | None:
    return _state.options[-1] if _state.options else None


class JaxSemantics:
    """The context returned by ``jax_semantics()``; see there."""

    def __init__(self, defer: bool = True, random: str = "invariant") -> None:
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
            pending.install_to_local_hook()  # before any compiled frame can defer
            numpy_interop.install_array_wrap()  # numpy 2's signature: no warning
            mode = _JaxSemanticsMode()
            mode.__enter__()
            _state.mode = mode
            _state.set_options()  # the mode's copies of the options
            dtensor_handlers.install({local_views.VIEW: local_views.view_handler,
                                      pending_clone.CLONE: pending_clone.clone_handler}, active)
            # a step compiled by inductor in this scope buckets its all-reduces
            _state.undo_inductor_buckets = compiled_buckets.inductor_buckets()
        return self

    def __exit__(self, *exc: Any) -> None:
        if not _state.options:
            return
        _state.options.pop()
        _state.set_options()
        if not _state.options and _state.mode is not None:
            mode, _state.mode = _state.mode, None
            mode.__exit__(None, None, None)
            _state.undo_inductor_buckets()

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


def jax_semantics(defer: bool = True, random: str = "invariant") -> JaxSemantics:
    """A scope in which DTensor programs have JAX's semantics.

    ```python
    with torch_impl.simulate(8), torch_impl.jax_semantics():
        w = torch_impl.distribute_variable(np.ones((16, 8)), TensorLayout((None, "model"), mesh))
        y = torch.relu(x_host @ w - 1.0)        # host array: replicated input
        s = y.sum(0)                            # no Partial: reduced, spec ("model",)
        s.sum().backward()                      # w.grad has w's placement
    ```

    * plain tensors, numpy arrays and scalars meeting a DTensor are
      replicated on its mesh; a DTensor on a slice of another operand's mesh
      (FSDP2's ``dp`` submesh) is that mesh's array replicated over the axes
      it lacks; DTensors on two unrelated meshes raise
      ``parity.MeshMismatchError``;
    * every op's output has the spec JAX's explicit-mode rule gives (see
      ``parity.torch_impl.semantics.rules``), which ``describe`` and
      ``typeof`` report; where JAX calls an op ambiguous, the reduction is
      completed and a result returned;
    * reshards happen above autograd, and every leaf's gradient has the
      leaf's placement.

    ``defer=True`` (default) keeps a pending sum (DTensor's ``Partial``)
    through linear ops (add, scalar mul, sum, reshapes, a matmul with a
    replicated operand) and completes it before any other op, ``describe``,
    ``typeof``, ``to_numpy``, ``.item()`` and ``to_local()``, or at the
    program's own ``redistribute``: DTensor code that declares a pending
    output (torch's ``RowwiseParallel``) keeps it, with the one collective
    it asks for. An in-place op into a pending sum completes it in place
    first. ``defer=False`` completes every sum where it arises.

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


# --- unwrapping subclasses (a Keras Variable holding a DTensor) ---
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


@torch.compiler.assume_constant_result
def _name_of(func) -> str | None:
    # Under torch.compile dynamo traces this mode; a function's ``__name__``
    # must be a constant there, or every string test on it breaks the graph.
    return getattr(func, "__name__", None)


_is_compiling = torch.compiler.is_compiling  # dynamo folds it (by identity) to True
_grad_enabled = torch.is_grad_enabled
_GRAD_ACCESS = (torch.Tensor.grad.__get__, torch.Tensor.grad.__set__)  # equal, never identical
_GRADS_PENDING = gradient_buckets.PENDING  # [n]: leaves whose gradient waits in a bucket


class _JaxSemanticsMode(TorchFunctionMode):
    defer = False  # this thread's innermost scope's option (_State.set_options)
    scope_options: dict | None = None  # and that scope's options

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
                        if _state.options:
                            return _eager(func, args, {}, key)
                        return _on_carried_thread(self, func, args, {}, key)
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
                        if _state.options:
                            return _eager(func, args, {}, key)
                        return _on_carried_thread(self, func, args, {}, key)
            if func in fast_path.DIRECT:
                return func(*args, **kwargs) if kwargs else func(*args)
            key = fast_path.signature(func, args, kwargs, self.defer)
            if key is not None and key in fast_path.CLEAN:
                return func(*args, **kwargs) if kwargs else func(*args)
            if _state.options:
                return _eager(func, args, kwargs or {}, key)
            return _on_carried_thread(self, func, args, kwargs or {}, key)
        kwargs = kwargs or {}
        if compile_support.runs_untraced(func):  # backward: never traced by dynamo
            return _backward(func, args, kwargs)
        name = _name_of(func)
        if name in _PASSTHROUGH and not _ruled_property(name, func):
            return func(*args, **kwargs)
        if name is not None and name.startswith("_foreach_"):
            parts = foreach.split(args, kwargs)
            if parts is not None:  # elements on several meshes: one call per mesh
                return foreach.joined(parts, [_traced(func, name, a, k) for _, a, k in parts])
        return _traced(func, name, args, kwargs)


def _traced(func, name: str | None, args: tuple, kwargs: dict) -> Any:
    """A call met while dynamo traces (not a backward, not a passthrough)."""
    mesh, rehome, plain = operands.find_mesh(args, kwargs)
    if mesh is None:
        return _plain(func, args, kwargs)
    if name in numpy_interop.NAMES:  # a conversion, not an op
        return numpy_interop.convert(name, args, kwargs)
    return _run(func, name or "", args, kwargs, mesh, None, rehome, plain)


def _on_carried_thread(mode: _JaxSemanticsMode, func, args: tuple, kwargs: dict,
                       key: tuple | None) -> Any:
    """``_eager`` on a thread that runs ``mode`` without a scope of its own:
    torch carries the function modes, not parity's thread-local scope, to
    the thread its autograd engine runs a CUDA backward on (activation
    checkpointing's recompute, a custom Function's backward, a hook run
    there). The call runs with the options of the scope that entered
    ``mode``, as it would on the scope's own thread."""
    _state.options.append(mode.scope_options)
    _state.mode, _state.defer = mode, mode.defer
    try:
        return _eager(func, args, kwargs, key)
    finally:
        _state.options.pop()
        _state.mode, _state.defer = None, False


def _eager(func, args: tuple, kwargs: dict, key: tuple | None) -> Any:
    """An eager call that is not known clean: the whole rule."""
    if compile_support.runs_untraced(func):  # backward: never traced by dynamo
        return _backward(func, args, kwargs)
    name = getattr(func, "__name__", None)
    if name in _PASSTHROUGH and not _ruled_property(name, func):
        fast_path.remember_direct(func)
        return func(*args, **kwargs)
    if name is not None and name.startswith("_foreach_"):
        parts = foreach.split(args, kwargs)
        if parts is not None:  # elements on several meshes: one call per mesh
            return foreach.joined(parts, [_eager(func, a, k, None) for _, a, k in parts])
    mesh, rehome, plain = operands.find_mesh(args, kwargs)
    if mesh is None:
        return _plain(func, args, kwargs)
    if name in numpy_interop.NAMES:  # a conversion, not an op
        return numpy_interop.convert(name, args, kwargs)
    return _run(func, name or "", args, kwargs, mesh, key, rehome, plain)


def _plain(func, args: tuple, kwargs: dict) -> Any:
    """A call without DTensors. Under ``random="counter"`` a random op on
    plain tensors draws from the same counter generator as on DTensors
    (the unsharded program's values are the sharded one's)."""
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
         rehomed: bool = False, plain: bool = False) -> Any:
    """The op with a DTensor operand on ``mesh`` (``operands.find_mesh``:
    ``rehomed``, some on another object of the same mesh; ``plain``, a plain
    tensor or numpy array among the operands), as the module docstring
    says; ``key``: the call's fast-path signature, remembered if clean."""
    defer = _defer()
    # The operands, in one module: promoted, rehomed, completed for an
    # observer.
    if plain:
        if operands.writes_gradient_into_plain(name, args, kwargs):
            return operands.write_into_plain(func, args, kwargs)
        if key is not None and not operands.replicated_by_dtensor(name, args, kwargs):
            key = None  # the fast path would hand DTensor what it does not replicate
        args, kwargs = operands.promote(args, kwargs, mesh)
    if rehomed:  # the same mesh as another object, or a slice of it: one mesh
        written = args[0] if args and fallback.inplace_by_name(func) else None
        args, kwargs = operands.rehome(args, kwargs, mesh)
        if written is not None and args[0] is not written:
            # an in-place op writes through the lifted view into the
            # operand's own block: the operand itself is the result
            _run(func, name, args, kwargs, mesh)
            return written
    if loss_parallel.applies(func) or name in _OBSERVERS:
        # DTensor's own parallel loss (the user asked for it), or an op that
        # looks at values: pending sums completed, then the op as it is
        args, kwargs = operands.completed(args, kwargs)
        if loss_parallel.own_route(func, args, kwargs):  # a loss DTensor's handlers get wrong
            return loss_parallel.run(func, args, kwargs, _state.mode)
        return func(*args, **kwargs)
    if unreduced.involved(args, kwargs):  # a typed pending sum (P(unreduced=)): JAX's rules
        return unreduced.run_on_unreduced(func, name, args, kwargs)
    if random_ops.draws(func, args, kwargs) and _state.options[-1]["random"] != "per_rank":
        return random_ops.run(func, args, kwargs, mesh,  # the unsharded program's values
                              counter=_state.options[-1]["random"] == "counter")
    original = func  # sgn of a real tensor runs as sign: its ZeroTensor gradient crashed
    func = zero_tensor_grads.replacement(func, args, kwargs)  # simulated ranks (torch #108983)
    grad = torch.is_grad_enabled()
    # the decision around the op: cached per description of the call, and
    # made outside dynamo's trace under torch.compile (see ``decision``)
    plan, actions, keep_partial = decision.decision_for(func, args, kwargs, mesh, defer, grad)
    chosen = plan is not None and plan[3]
    if chosen:  # on Explicit axes JAX refuses it
        explicit = explicit_check.explicit_axes(mesh)
        if explicit:
            typed = explicit_check.refuse_if_ambiguous(
                func, name, decision.plan_of(plan), decision.operands(args, kwargs), args,
                kwargs, mesh, explicit)
            if typed is not None:  # a mixed mesh: JAX's types over the Explicit axes lay it out
                plan, actions, keep_partial = decision.decision_with(typed, args, kwargs, mesh,
                                                                     defer, grad)
    if actions:
        args, kwargs, moved = reshard.prepared(func, args, kwargs, actions, grad)
    else:  # no operand needs anything (the decision says so once per description)
        moved = False
    out, direct = compute.compute(func, name, args, kwargs, mesh, grad)
    result = _finish(out, plan[1] if plan is not None else None, keep_partial)
    if (direct and key is not None and not moved and not rehomed and result is out
            and not _any_partial(out) and not chosen
            and not random_ops.listed(func) and func is original):  # chosen: re-checked per
        # mesh; random: per option; a replaced op: the fast path would run the original
        fast_path.remember(key)
    return result


def _any_partial(out: Any) -> bool:
    leaves, _ = tree_flatten(out)
    return any(isinstance(t, DTensor) and S.has_partial(t) for t in leaves)


def _finish(out: Any, outputs: Any, keep_partial: bool) -> Any:
    """Each DTensor output laid out as the plan's ``outputs`` say (a spec
    per output, ``None``, or a function of the outputs giving them), pending
    sums completed or deferred; each output's action from
    ``decision.output_action`` (cached; outside dynamo's trace)."""
    if isinstance(out, DTensor):
        leaves, tree = [out], None
    else:
        leaves, tree = tree_flatten(out)
    if callable(outputs):
        outputs = outputs([t for t in leaves if isinstance(t, DTensor)])
    changed = False
    k = 0
    for i in range(len(leaves)):
        t = leaves[i]
        if not isinstance(t, DTensor):
            continue
        spec = outputs[k] if outputs is not None and k < len(outputs) else None
        k += 1
        kind, target = decision.output_action(t, spec, keep_partial)
        if kind == "keep":
            continue
        if kind == "defer":
            leaves[i] = pending.mark_deferred(t)
        elif kind == "complete":
            leaves[i] = pending.complete(S.without_strided(t))
        else:
            leaves[i] = redistribute.move(t, target)
        changed = True
    if not changed:
        return out
    return leaves[0] if tree is None else tree_unflatten(leaves, tree)
