"""A compiled step's all-reduces bucketed as XLA's combiner buckets them.

Compiled with ``aot_eager``, a step's backward is AOTAutograd's graph, run
as one autograd node: the eager gradient buckets (``gradient_buckets``)
never see its gradient reductions, and each pending sum is one all_reduce
(the tensor-parallel MLP on mesh (2, 2): 4 launches where JAX's compiled
step launches 2). ``aot_eager_bucketed`` is ``aot_eager`` with inductor's
all-reduce bucketing pass run on the forward and the backward graph, no
inductor code generation: the all_reduces of one graph on the same group,
reduce op and dtype become one all_reduce of their concatenation (same
values: each element is summed over the same ranks). That MLP then
launches 3: the backward's two weight gradients share one; the forward's
partial sum (on ``model``) and the loss (on ``batch``) stay apart, on
different groups. XLA folds the loss into the gradients' launch; here the
forward graph hands the completed loss back before the backward graph
runs, so they cannot share one.

    step = torch.compile(step, backend=aot_eager_bucketed)

Under inductor -- what ``torch.compile(step)`` and Keras's
``jit_compile=True`` use when nobody names a backend -- the same pass is
inductor's ``bucket_all_reduces_fx = "all"``: inside ``jax_semantics()``
parity sets it for the thread (``inductor_buckets``; inductor's config is
per thread), so a step compiled there buckets as XLA does without naming a
backend (the MLP: 3 launches, as above). A value the user or the
environment set for that option is left alone; outside the scope nothing
changes. ``aot_eager`` named by the user stays ``aot_eager`` (4 launches).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from parity.torch_impl.runtime.torch_compat import (
    aot_backend,
    boxed,
    bucket_all_reduces,
    inductor_option_is_default,
    inductor_option_patcher,
)


def _bucketed(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """One AOTAutograd graph with its all-reduces bucketed, run as traced."""
    bucket_all_reduces(gm)
    gm.graph.lint()
    gm.recompile()
    return boxed(gm.forward)


def _backend() -> Callable:
    return aot_backend(_bucketed, _bucketed)


def aot_eager_bucketed(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """A ``torch.compile`` backend: ``aot_eager`` with each graph's
    all-reduces on one group, reduce op and dtype bucketed into one (see
    the module docstring)."""
    return _backend()(gm, example_inputs)


def _nothing() -> None:
    return None


_OPTION = "bucket_all_reduces_fx"
_patcher: list[Callable[[], Callable[[], None]]] = []  # made once: it costs a microsecond


def inductor_buckets() -> Callable[[], None]:
    """Inductor's all-reduce bucketing (``bucket_all_reduces_fx = "all"``)
    on for this thread; returns the undo, which restores the option as it
    was. Nothing changes (the undo does nothing) when the user or the
    environment set the option. ``jax_semantics()`` calls it when its
    outermost scope on a thread opens and undoes it when that scope
    closes."""
    if not inductor_option_is_default(_OPTION):
        return _nothing
    if not _patcher:
        _patcher.append(inductor_option_patcher(_OPTION, "all"))
    return _patcher[0]()
