"""Per-call work of the collectives on a ``fake`` process group (one process
as rank 0 of 4, collectives are no-ops): what each call allocates and
resolves, counted, never timed. Each test runs in a child process (the
process group is process-wide)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SETUP = """
import json
import torch, torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
import parity
from parity import torch_impl as ti
from parity.torch_impl.collectives import eager as collectives, donation
dist.init_process_group("fake", rank=0, world_size=4, store=FakeStore())
mesh = parity.DeviceMesh((4,), ("x",))
layout = parity.TensorLayout(("x",), mesh)
torch.set_grad_enabled(False)
def block(n=1024):
    return ti.distribute_data_input(torch.ones(n), layout)
def ptr(t):
    return t.to_local().data_ptr()
def fresh(n=1024):  # a block of n elements on its own storage (a collective's output)
    return ti.all_gather(block(n // 4), 0, "x")
"""


def run(body: str) -> dict:
    script = SETUP + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_gather_and_a_scatter_in_turn_with_donation_reuse_two_buffers():
    out = run("""
        x, seen = fresh(), set()
        for _ in range(6):
            y = ti.all_gather(x, 0, "x", donate=True)
            seen.add(ptr(y))
            x = ti.reduce_scatter(y, 0, "x", donate=True)
            seen.add(ptr(x))
        out = {"buffers": len(seen)}
    """)
    # The first gather's output and the first input's block: nothing allocated after.
    assert out["buffers"] == 2


def test_without_donation_every_gather_allocates():
    out = run("""
        x, seen, keep = block(), set(), []
        for _ in range(4):
            y = ti.all_gather(x, 0, "x")
            keep.append(y)
            seen.add(ptr(y))
        out = {"buffers": len(seen)}
    """)
    assert out["buffers"] == 4


def test_a_donated_block_the_caller_still_holds_is_not_reused():
    out = run("""
        x = fresh()
        held = x.to_local()
        before = held.clone()
        y = ti.all_gather(x, 0, "x", donate=True)
        z = ti.reduce_scatter(y, 0, "x")      # an output of held's size
        out = {"reused": ptr(z) == held.data_ptr(), "unchanged": bool(torch.equal(held, before))}
    """)
    assert out == {"reused": False, "unchanged": True}


def test_a_donated_block_let_go_by_its_other_holder_before_the_next_call_is_reused():
    # As gloo's work does with an all_gather's input: it holds the block when
    # the collective returns and lets go soon after.
    out = run("""
        x = fresh()
        held = x.to_local()
        y = ti.all_gather(x, 0, "x", donate=True)
        address = held.data_ptr()
        del held
        z = ti.reduce_scatter(y, 0, "x")      # an output of the donated block's size
        out = {"reused": ptr(z) == address}
    """)
    assert out == {"reused": True}


def test_a_donated_block_viewed_elsewhere_is_not_reused():
    out = run("""
        x = fresh()
        alias = torch.empty(0).set_(x.to_local().untyped_storage())  # same storage, no _base
        y = ti.all_gather(x, 0, "x", donate=True)
        z = ti.reduce_scatter(y, 0, "x")
        out = {"reused": ptr(z) == alias.data_ptr()}
    """)
    assert out == {"reused": False}


def test_a_donated_block_an_autograd_graph_saved_is_not_overwritten():
    # mul saves its operand for the backward; overwriting the block would
    # silently change the gradient.
    out = run("""
        x = fresh()
        w = torch.full((1024,), 2.0, requires_grad=True)
        loc = x.to_local()                  # grad off: x's block itself
        with torch.enable_grad():
            h = loc * w                     # saves the block for w's gradient
        expected = loc.clone()
        del loc
        address = ptr(x)
        y = ti.all_gather(x, 0, "x", donate=True)
        y.to_local().fill_(7.0)
        z = ti.reduce_scatter(y, 0, "x")    # an output of the donated block's size
        with torch.enable_grad():
            h.sum().backward()
        out = {"reused": ptr(z) == address, "grad_ok": bool(torch.equal(w.grad, expected))}
    """)
    assert out == {"reused": False, "grad_ok": True}


def test_a_donated_block_that_is_not_contiguous_is_not_kept():
    out = run("""
        rows = parity.TensorLayout(("x", None), mesh)
        square = ti.all_gather(ti.distribute_data_input(torch.ones(8, 32), rows), 0, "x")
        x = square.t().clone()              # its own block, strides (1, 32): not contiguous
        strided = not x.to_local().is_contiguous() and x.to_local()._base is None
        y = ti.all_gather(x, 0, "x", donate=True)
        z = ti.reduce_scatter(y, 0, "x")    # an output of the donated block's shape
        # Kept and reused, the strided block would be z's (its address
        # proves nothing: freed, its memory may go to z's new output).
        out = {"strided": strided, "contiguous": z.to_local().is_contiguous()}
    """)
    assert out == {"strided": True, "contiguous": True}


def test_a_plan_found_by_identity_still_refuses_a_bool_axis_and_an_unknown_op():
    out = run("""
        x = fresh()
        ti.all_gather(x, 0, "x")
        ti.all_reduce(x, "sum", axis_name="x")
        refused = []
        for call in (lambda: ti.all_gather(x, False, "x"),
                     lambda: ti.all_reduce(x, "prod", axis_name="x"),
                     lambda: ti.all_gather(x, 0, "y")):
            try:
                call()
            except parity.LayoutError:
                refused.append(True)
        out = {"refused": len(refused)}
    """)
    assert out == {"refused": 3}


def test_kept_blocks_are_bounded_and_released():
    out = run("""
        for n in range(4, 4 + 2 * donation.POOL_SIZE):
            ti.all_reduce(block(4 * n), "sum", axis_name="x")  # no donation: keeps nothing
            ti.all_gather(fresh(4 * n), 0, "x", donate=True)
        kept = len(donation._pool)
        donation.release_buffers()
        out = {"kept": kept, "after_release": len(donation._pool)}
    """)
    assert out["kept"] == 4 and out["after_release"] == 0  # POOL_SIZE


def test_repeated_calls_resolve_their_plan_once():
    out = run("""
        built = []
        real = collectives._build_plan
        def counting(*args):
            built.append(args[1])
            return real(*args)
        collectives._build_plan = counting
        x = block()
        for _ in range(5):
            ti.all_reduce(x, "sum", axis_name="x")
            ti.all_gather(x, 0, "x")
            ti.reduce_scatter(x, 0, "x")
        out = {"built": sorted(built)}
    """)
    assert out["built"] == ["all_gather", "all_reduce", "reduce_scatter"]


def test_repeated_collectives_run_no_python_outside_parity():
    # The hot path calls the process group's C++ method and DTensor's C++
    # constructor: no torch.distributed / DTensor Python per call, except
    # DTensorSpec.__hash__ (the plan key holds the spec; its hash is cached).
    out = run("""
        import os, sys
        # parity's own files: the imported package's directory, not any path
        # that merely contains "/parity/" (a checkout may be named parity).
        package = os.path.dirname(os.path.abspath(parity.__file__)) + os.sep
        x = block()
        calls = lambda: (ti.all_reduce(x, "sum", axis_name="x"), ti.all_gather(x, 0, "x"),
                         ti.reduce_scatter(x, 0, "x", "mean"))
        calls()
        foreign, own = [], []
        def hook(frame, event, arg):
            if event == "call":
                name = frame.f_code.co_filename
                (own if name.startswith(package) else foreign).append(name + ":" + frame.f_code.co_name)
        sys.setprofile(hook)
        for _ in range(3):
            calls()
        sys.setprofile(None)
        foreign = [f for f in foreign if not f.startswith("<string>")
                   and not f.endswith("/_dtensor_spec.py:__hash__")]
        out = {"foreign": sorted(set(foreign)), "own": len(own)}
    """)
    assert out["foreign"] == []
    assert out["own"] > 0  # the hook saw parity's own calls: the check is not vacuous


def test_collectives_inside_torchs_coalescing_manager_are_queued_not_sent():
    # torch's manager takes one kind of collective at a time.
    out = run("""
        from torch.distributed import distributed_c10d as c10d
        x = block()
        group = dist.group.WORLD
        calls = {"all_reduce": lambda: ti.all_reduce(x, "sum", axis_name="x"),
                 "all_gather": lambda: ti.all_gather(x, 0, "x"),
                 "reduce_scatter": lambda: ti.reduce_scatter(x, 0, "x")}
        out = {}
        for name, call in calls.items():
            call()  # its plan built outside
            with dist._coalescing_manager(group=group, device=torch.device("cpu")):
                call()
                call()
                out[name] = len(c10d._world.pg_coalesce_state[group])
    """)
    assert out == {"all_reduce": 2, "all_gather": 2, "reduce_scatter": 2}
