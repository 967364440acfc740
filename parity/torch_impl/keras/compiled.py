"""Keras steps compiled with ``jit_compile=True`` under parity, as
``trainer._wrap_make`` applies to each ``torch.compile``'d step:

* ``static_shapes``: the step is compiled with ``dynamic=False``, as
  ``jax.jit`` traces per shape. Keras compiles with torch's default
  (``dynamic=None``): a frame dynamo compiles a second time with other sizes
  gets symbolic sizes. Parity's output relayout (a LayoutMap ``...output``
  entry) is one frame after dynamo's graph break in a layer call, called for
  every layer's output with that layer's shape; with symbolic sizes
  AOTAutograd's tracer then hit Python's recursion limit in DTensor's
  sharding code (``RecursionError`` in ``proxy_tensor._compute_proxy``, a
  chain of lazily computed size proxies; torch 2.13, 2 and 4 gloo ranks).
* ``naming_compile_errors``: a dynamo failure becomes ``KerasCompileError``
  naming the model, the step and the layer dynamo failed in.
"""

from __future__ import annotations

import functools

def static_shapes(fn):
    """The function ``fn`` (``torch.compile(step)`` as Keras made it, with
    torch's defaults) compiles, compiled again with ``dynamic=False``
    (module docstring); the other options stay torch's defaults.

    Raises ``ValueError`` when ``fn`` is not a ``torch.compile``'d function.
    """
    import torch

    original = getattr(fn, "_torchdynamo_orig_callable", None)
    if original is None:
        raise ValueError(f"static_shapes: {fn!r} is not a torch.compile'd function "
                         "(no _torchdynamo_orig_callable).")
    return torch.compile(original, dynamic=False)


def naming_compile_errors(fn, model, step: str):
    """``fn`` (a ``torch.compile``'d step) raising ``KerasCompileError`` --
    naming the model, the step and the layer dynamo failed in -- in place
    of dynamo's own error."""
    from parity.torch_impl.runtime.torch_compat import TorchDynamoException

    @functools.wraps(fn)
    def compiled_step(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - only dynamo's errors are replaced
            dynamo_err = _dynamo_error(err, TorchDynamoException)
            if dynamo_err is None:
                raise
            raise compile_error(dynamo_err, model, step) from err

    return compiled_step


def _dynamo_error(err: BaseException, dynamo_type: type) -> BaseException | None:
    """``err`` or the dynamo error it was raised from: Keras's layer call
    re-raises a failure inside ``call`` as a new exception (a
    ``RuntimeError`` "Exception encountered when calling ...") with the
    original as ``__context__``."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, dynamo_type):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def compile_error(err: BaseException, model, step: str):
    """The ``KerasCompileError`` for dynamo's ``err`` in ``model``'s
    ``step``: the layer is the innermost frame of dynamo's user stack
    (``err.real_stack``) that runs a layer's ``call`` of ``model``."""
    from parity.errors import KerasCompileError

    layer = _failing_layer(getattr(err, "real_stack", None) or (), model)
    # BackendCompilerFailed says only "backend='...' raised:"; the cause is inside.
    cause = getattr(err, "inner_exception", None) or err
    text = str(cause).strip()
    reason = f"{type(cause).__name__}: {text.splitlines()[0] if text else ''}"
    where = f"in layer {layer!r}" if layer else "outside the model's layers"
    return KerasCompileError(
        f"jit_compile=True: torch.compile cannot compile the {step} step of model "
        f"{model.name!r} {where}: {reason}. Fix: compile the model "
        "with jit_compile=False (the same values, eagerly), or change that layer's call.",
        model=model.name, step=step, layer=layer, reason=reason,
    )


def _failing_layer(stack, model) -> str | None:
    """The layers of ``model`` whose ``call`` runs the innermost of the
    frames ``stack`` (``traceback.FrameSummary``s) -- ``"dense_1"``, or
    ``"Dense (dense_1, dense_2)"`` where several layers share that code --
    or ``None``."""
    by_code: dict = {}
    for layer in model._flatten_layers(include_self=False, recursive=True):
        code = getattr(type(layer).call, "__code__", None)
        if code is not None:
            by_code.setdefault(code, []).append(layer)
    for frame in reversed(list(stack)):
        here = [(code, layers) for code, layers in by_code.items()
                if code.co_filename == frame.filename and code.co_name == frame.name
                and code.co_firstlineno <= (frame.lineno or 0)]
        if not here:
            continue
        _, layers = max(here, key=lambda item: item[0].co_firstlineno)
        if len(layers) == 1:
            return layers[0].name
        return f"{type(layers[0]).__name__} ({', '.join(layer.name for layer in layers)})"
    return None
