"""Why FSDP2 + TP compiled with dynamo's default shapes fails: torch's, not
parity's (issue 23; docs/torch-stack.md, "Compiled steps" 3.).

The program below is plain torch, no parity: a replicated DTensor ``x``
of shape ``(B, S, 16)`` times a replicated ``(8, 16)`` weight, in
``torch.compile(backend="aot_eager")``, forward and backward, called with a
second ``(B, S)``. The second call recompiles with symbolic ``B, S``
(automatic dynamic shapes: what FSDP2 + TP's per-block frames get, their
code shared by modules called with other shapes), and AOTAutograd's tracer
recurses without end. The cause, measured: ``proxy_tensor``'s
``sympy_expr_tracker`` maps a bare symbol to the *last* SymInt registered
with that expression; ``sym_max(s27, 1)`` (a contiguous stride) simplifies
to ``s27`` and replaces the input's entry with its own thunk, and when the
thunk is forced its argument -- an ``s27`` node DTensor made outside the
tracer (its spec's sizes), so found only by expression -- resolves to that
same thunk. Kept first-one-wins (as the tracker keyed by node already is),
the program compiles, and its values and gradients equal eager's; with that
change alone, parity's FSDP2 + TP step with dynamo's default also trains
and equals the unsharded model (docs/torch-stack.md). Nearest upstream:
pytorch#152954 (a DTensor recompile with SymInts, whose repro "now fails
with an infinite recursion" after the expression fallback of
pytorch#164113), under the open umbrella pytorch#152963.

``dynamic=True`` fails earlier, on another gap of the same fallback
(the last test). If the first test fails, torch fixed it: compile ``fsdp_tp`` with dynamo's
default (``compiled_stack_worker.py fsdp_tp_dynamic``) and update the docs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PROGRAM = """
import json
import torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, distribute_tensor
from torch.testing._internal.distributed.fake_pg import FakeStore
{patch}
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
mesh = init_device_mesh("cpu", (2,))
torch.manual_seed(0)
w = distribute_tensor(torch.randn(8, 16), mesh, [Replicate()]).requires_grad_()
step = torch.compile(lambda x: x @ w.t(), backend="aot_eager", dynamic={dynamic})
out = {{}}
for shape in ((4, 8, 16), (2, 4, 16)):  # the second call recompiles with symbolic sizes
    x = distribute_tensor(torch.randn(shape), mesh, [Replicate()]).requires_grad_()
    try:
        y = step(x)
    except Exception as err:
        root = err
        while (getattr(root, "inner_exception", None) or root.__cause__) is not None:
            root = getattr(root, "inner_exception", None) or root.__cause__
        out[str(shape)] = f"{{type(root).__name__}}: {{str(root).splitlines()[0][:200]}}"
        break
    y.sum().backward()
    local_x, local_w = x.to_local().detach().requires_grad_(), w.to_local().detach().requires_grad_()
    want = local_x @ local_w.t()
    want.sum().backward()
    out[str(shape)] = max((y.to_local() - want).abs().max().item(),
                          (x.grad.to_local() - local_x.grad).abs().max().item())
    w.grad = None
print(json.dumps(out))
"""

FIRST_ONE_WINS = """
import torch.fx.experimental.proxy_tensor as proxy_tensor
class FirstOneWins(dict):
    def __setitem__(self, key, value):
        if key not in self:
            super().__setitem__(key, value)
_init = proxy_tensor._init_proxy_trackers
def _init_first_one_wins(tracer):
    _init(tracer)
    tracer.sympy_expr_tracker = FirstOneWins()
proxy_tensor._init_proxy_trackers = _init_first_one_wins
"""


def run(patch: str = "", dynamic: bool | None = None) -> dict:
    program = textwrap.dedent(PROGRAM.format(patch=patch, dynamic=dynamic))
    proc = subprocess.run([sys.executable, "-c", program],
                          capture_output=True, text=True, cwd=ROOT, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_plain_dtensor_recompiled_with_symbolic_sizes_recurses_without_end():
    out = run()
    assert out["(4, 8, 16)"] == 0.0, out  # static sizes: compiles, equals eager
    assert out["(2, 4, 16)"].startswith("RecursionError: maximum recursion depth"), out


def test_the_same_program_compiles_when_the_expression_tracker_keeps_its_first_entry():
    out = run(FIRST_ONE_WINS)
    assert out == {"(4, 8, 16)": 0.0, "(2, 4, 16)": 0.0}, out


def test_plain_dtensor_compiled_with_every_size_symbolic_loses_a_power_of_a_symbol():
    """``dynamic=True`` (the docs' "TP with ``dynamic=True``" row): the first
    call already fails, on a size ``s**2`` that ``_build_proxy_for_sym_expr``
    cannot rebuild (no handler for ``sympy.Pow``; pytorch#188278 adds one,
    after torch 2.13)."""
    out = run(dynamic=True)
    assert list(out) == ["(4, 8, 16)"], out
    failure = out["(4, 8, 16)"]
    assert failure.startswith("RuntimeError: ") and "**2" in failure, out
    assert "is not tracked with proxy" in failure, out
