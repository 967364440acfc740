"""``torch._foreach_*`` calls reach a ``TorchFunctionMode`` inside
``torch.compile`` as they do eagerly (``semantics/compile_support.py``).

Without it dynamo passes them straight to the graph (they are not in
``torch.overrides.get_overridable_functions``, which leaves out private
names), and ``clip_grad_norm_(foreach=True)`` in a compiled TP step met
DTensor and plain gradients in one ``_foreach_norm`` that DTensor refuses
(the compiled ``tp_clip_foreach`` configuration of
``tests/test_compiled_stack.py``)."""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from parity import torch_impl  # noqa: F401 - loads parity's compile support


class _Recording(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def _norms(ts):
    return torch._foreach_norm(ts, 2.0)[0] + torch._foreach_mul(ts, 2.0)[1].sum()


def test_a_mode_sees_foreach_calls_when_compiled_as_when_eager():
    ts = [torch.randn(4), torch.randn(3)]
    seen = {}
    for label, fn in (("eager", _norms),
                      ("compiled", torch.compile(_norms, backend="eager", fullgraph=True))):
        with _Recording() as mode:
            fn(ts)
        seen[label] = mode.seen
    assert seen["compiled"] == seen["eager"], seen
    assert "_foreach_norm" in seen["compiled"] and "_foreach_mul" in seen["compiled"]
