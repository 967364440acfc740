"""Run one case compiled: the parity column inside ``torch.compile``.

``CompiledTorchRunner`` is ``run_torch.TorchRunner`` (inputs distributed
by ``parity.torch_impl``, outputs read by ``describe`` / ``to_numpy``) whose
op call is compiled: the op and, for a gradient case, the loss
``sum(outputs)`` form one function given to
``torch.compile(fullgraph=True, dynamic=False)`` with a CPU-cheap dynamo
backend (``aot_eager`` by default, or ``eager``), called inside
``jax_semantics()``; ``loss.backward()`` follows the compiled call (see
``conformance.reports.compiled.compile_header`` for what each backend does with the
backward). ``torch._dynamo.reset()`` runs before every case, so no graph
or recompile budget is shared between cases.

Nothing falls back to eager: a graph break (``fullgraph=True`` makes dynamo
raise it), a backend failure, or a call that compiled no graph at all is a
*compile error* (``conformance.reports.compiled.COMPILE_CATEGORY``) with dynamo's
reason. An exception whose cause is an error the eager column also
categorizes (a ``parity.ParityError``, or a DTensor message
``conformance.running.errors`` knows) is an op error with that category, whichever
dynamo wrapper carried it. Each case that compiled records
``"compile": {"graphs", "graph_ops", "seconds"}``.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from conformance.reports.compiled import COMPILE_CATEGORY, DEFAULT_BACKEND, compile_header
from conformance.running.errors import categorize, error_record
from conformance.running.run_torch import TorchRunner

# Exceptions raised by torch.compile's own machinery (by module of the class).
_COMPILER_MODULES = ("torch._dynamo", "torch._inductor", "torch._functorch", "torch.fx",
                     "torch._subclasses", "torch._guards")


class _GraphCounter:
    """A dynamo backend that counts the graphs (and their ops) it is given,
    then hands each to the named backend."""

    def __init__(self, backend: str) -> None:
        from torch._dynamo import lookup_backend

        self.inner = lookup_backend(backend)
        self.graphs = 0
        self.ops = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Any:
        self.graphs += 1
        self.ops += sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method"))
        return self.inner(gm, example_inputs)


def _chain(err: BaseException) -> list[BaseException]:
    """``err`` and its causes (``__cause__``, else ``__context__``), outermost first."""
    seen: list[BaseException] = []
    while err is not None and err not in seen and len(seen) < 20:
        seen.append(err)
        err = err.__cause__ or err.__context__
    return seen


_COMPILER_PATHS = tuple(f"/{m.replace('.', '/')}/" for m in _COMPILER_MODULES)


def _from_compiler(err: BaseException) -> bool:
    """Whether ``err`` is the compiler's: its class lives in the compiler's
    modules, or the frame that raised it does (e.g. AOTAutograd's backward
    checking a tangent's metadata), or it is a mode's missing rule for a
    higher-order operator -- which only compiled programs call (e.g.
    ``with_effects``, AOTAutograd's wrapper of an op with side effects such
    as linalg's error checks, which simulated ranks' ``LocalTensorMode``
    cannot run)."""
    if type(err).__module__.startswith(_COMPILER_MODULES):
        return True
    text = str(err)
    if (isinstance(err, NotImplementedError)
            and text.startswith("There was no rule registered for HigherOrderOperator")):
        return True
    if isinstance(err, TypeError) and "no implementation found for 'torch.ops.higher_order." in text:
        return True  # the same, when a torch function mode is asked first
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and any(p in tb.tb_frame.f_code.co_filename for p in _COMPILER_PATHS)


def compile_failure(err: BaseException, stage: str = "compile") -> dict[str, Any] | None:
    """The compile-error record of an exception from a compiled call, or
    ``None`` when it is an op error (the eager column would record it too).

    An op error: no exception in the chain comes from the compiler, or one
    in the chain has a specific category (``conformance.running.errors.categorize``
    is not ``other``). Anything else is a compile error, typed by the
    outermost compiler exception, its message naming the innermost cause;
    ``stage`` says where it was raised (``compile``: the compiled call,
    ``backward``: the compiled backward).
    """
    chain = _chain(err)
    if any(categorize(e) != "other" for e in chain):
        return None
    compiler = [e for e in chain if _from_compiler(e)]
    if not compiler:
        return None
    record = error_record(compiler[0], category=COMPILE_CATEGORY)
    root = chain[-1]
    if root is not compiler[0]:
        record["cause"] = f"{type(root).__name__}: {str(root).strip()[:500]}"
    record["stage"] = stage
    return record


def op_error_under_compile(err: BaseException) -> BaseException:
    """The exception to record for an op error: the first one in the chain
    with a specific category (unwrapped from dynamo), else ``err`` itself."""
    for e in _chain(err):
        if categorize(e) != "other":
            return e
    return err


def _backward(total: torch.Tensor, leaves: list) -> None:
    """``total.backward()``, with explicit zero tangents for the outputs.

    The compiled function returns the outputs beside ``total``, so its
    backward graph wants a tangent for each. ``total.backward()`` leaves
    autograd to make zeros for them, and over simulated ranks those zeros
    are ``LocalTensor``s, not DTensors: AOTAutograd's backward refuses them
    ("we encountered a tensor subclass where we guessed its metadata
    incorrectly ... got LocalTensor", torch 2.13). Zeros shaped by each
    output (``zeros_like``: its placements) add nothing to the gradient. The
    outputs are not detached inside the compiled function instead: with
    ``aot_eager`` a detached reduction output then holds FakeTensors
    (``.numpy() is not supported for tensor subclasses`` when read).
    """
    outputs = [total] + [x for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad]
    tangents = [torch.ones_like(total)] + [torch.zeros_like(x) for x in outputs[1:]]
    torch.autograd.backward(outputs, tangents)


class CompiledTorchRunner(TorchRunner):
    """The parity column, each op compiled (module docstring)."""

    def __init__(self, n_devices: int, device: str = "cpu",
                 backend: str = DEFAULT_BACKEND) -> None:
        compile_header(backend)  # raises for an unknown backend
        super().__init__(n_devices, device, raw=False)
        self.compile_backend = backend
        self._failure: dict[str, Any] | None = None
        self._stats: dict[str, Any] | None = None

    def run(self, case: dict[str, Any]) -> dict[str, Any]:
        self._failure, self._stats = None, None
        entry = super().run(case)
        if entry["status"] != "ok" and self._failure is not None:
            entry["error"] = self._failure
        if self._stats is not None:
            entry["compile"] = self._stats
        return entry

    def call(self, fn, args: list, kwargs: dict, grad: bool) -> list:
        """``fn(*args, **kwargs)`` (and ``sum(outputs)``) compiled, then the
        backward. Raises the op's error, or (recording the compile error for
        ``run``) the compiler's; an op error that dynamo wrapped is recorded
        unwrapped, with ``wrapped_in`` naming the wrapper."""
        torch._dynamo.reset()
        counter = _GraphCounter(self.compile_backend)

        def step(*a, **kw):
            out = fn(*a, **kw)
            leaves = list(out) if isinstance(out, (tuple, list)) else [out]
            total = sum(leaf.sum() for leaf in leaves) if grad else None
            return leaves, total

        compiled = torch.compile(step, backend=counter, fullgraph=True, dynamic=False)
        start = time.perf_counter()
        with self.semantics():
            try:
                leaves, total = compiled(*args, **kwargs)
            except Exception as err:  # noqa: BLE001 - sorted into compile / op error
                self._failure = compile_failure(err)
                cause = op_error_under_compile(err)
                if self._failure is None and cause is not err:  # unwrapped from dynamo's wrapper
                    self._failure = {**error_record(cause), "wrapped_in": type(err).__name__}
                raise
            if counter.graphs == 0:
                self._failure = {"category": COMPILE_CATEGORY, "stage": "compile",
                                 "type": "NoGraph",
                                 "message": "torch.compile built no graph for this case: "
                                            "the op ran without being compiled"}
                raise RuntimeError(self._failure["message"])
            self._stats = {"graphs": counter.graphs, "graph_ops": counter.ops,
                           "seconds": round(time.perf_counter() - start, 4)}
            if grad:
                try:
                    _backward(total, leaves)
                except Exception as err:  # noqa: BLE001 - sorted into compile / op error
                    self._failure = compile_failure(err, stage="backward")
                    raise
        self._stats["graphs"] = counter.graphs  # a backward graph compiled lazily counts too
        return leaves
