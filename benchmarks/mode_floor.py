"""PROTOTYPE measurements (issue 13, item 4): what an op under
``jax_semantics()`` could cost at best, against plain DTensor.

Not parity's code path: each row is a stand-in, timed as ``per_call`` times
(rank 0 of a ``fake`` world of 4, mesh ``(4,)``, ``a + b`` on (256, 64)
float32 sharded on dim 0, CPU time, best of ``BLOCKS`` blocks, each row's
blocks alternating with plain DTensor's ``a + b``):

* ``python_mode``: a Python ``TorchFunctionMode`` that only calls the op --
  the floor of any Python function mode, parity's included;
* ``c_mode``: the same mode with ``__torch_function__`` written in C
  (``mode_floor_c.c``, built with the system C compiler into a temporary
  directory; the row says ``not available`` without one) -- what is left
  is torch's own mode machinery (the second argument parse, the mode
  stack), not Python;
* ``dispatch_mode``: a ``TorchDispatchMode`` that only calls the op (it
  runs below autograd, per aten op);
* ``jax_semantics``: parity's mode on a signature it has proven clean;
* ``registered_rule``: no mode at all; JAX's rule for ``aten.add.Tensor``
  given to DTensor as its sharding strategy (``register_sharding``), then
  plain ``a + b`` -- what a clean op costs when DTensor itself applies
  JAX's rule (DTensor caches the propagation). DTensor's strategy is put
  back afterwards. Only the sharding part of the mode's work can move
  there: replicating plain tensors, completing pending reductions and
  resharding leaves above autograd still need an interception point.

Run: ``python -m benchmarks.mode_floor`` (JSON rows; ``--quick`` for 200
calls per block).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from benchmarks.per_call import best_pair

WORLD = 4
BLOCKS = 7
CALLS = 2000


def _c_mode_base() -> tuple[type | None, str]:
    """The C base class of the ``c_mode`` row, or ``(None, why not)``."""
    import importlib.util

    source = Path(__file__).with_name("mode_floor_c.c")
    out = Path(tempfile.mkdtemp(prefix="parity_mode_floor_"))
    target = out / ("mode_floor_c" + sysconfig.get_config_var("EXT_SUFFIX"))
    cc = os.environ.get("CC", "cc")
    cmd = [cc, "-O2", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}",
           str(source), "-o", str(target)]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        return None, f"no C compiler ({cc})"
    except subprocess.CalledProcessError as err:
        return None, f"{cc} failed: {err.stderr.strip()[-300:]}"
    spec = importlib.util.spec_from_file_location("mode_floor_c", target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CallOnly, ""


@contextlib.contextmanager
def _registered_add_rule():
    """JAX's rule for ``aten.add.Tensor`` as DTensor's strategy while the
    block runs: equal placements in, the same out (a replicated operand
    meets a sharded one by resharding, as JAX's explicit mode would refuse
    to guess); DTensor's own strategy and cache restored after."""
    import torch
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor.experimental import register_sharding

    op = torch.ops.aten.add.Tensor
    prop = DTensor._op_dispatcher.sharding_propagator
    saved = {name: dict(getattr(prop, name)) for name in
             ("op_strategy_funcs", "op_to_schema_info", "op_single_dim_strategy_funcs",
              "op_to_schema_info_for_single_dim_strategy")}

    @register_sharding(op)
    def jax_add(x, y, alpha=1):  # noqa: ARG001 -- the op's signature
        rules = [([Replicate()], [Replicate(), Replicate()])]
        rules += [([Shard(d)], [Shard(d), Shard(d)]) for d in range(x.ndim)]
        return rules

    _clear_cache(prop)
    try:
        yield
    finally:
        for name, table in saved.items():
            getattr(prop, name).clear()
            getattr(prop, name).update(table)
        _clear_cache(prop)


def _clear_cache(prop) -> None:
    cache = prop.propagate_op_sharding
    if hasattr(cache, "cache_clear"):
        cache.cache_clear()


def measure(calls: int = CALLS, blocks: int = BLOCKS) -> list[dict]:
    """``[{"case", "parity_s", "raw_s", "note"}, ...]``: each stand-in
    against plain DTensor ``a + b``, on a fresh fake group."""
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.overrides import TorchFunctionMode
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torch.utils._python_dispatch import TorchDispatchMode

    import parity
    from parity import torch_impl as ti

    class PythonCallOnly(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **kwargs) if kwargs else func(*args)

    class DispatchCallOnly(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    c_base, c_missing = _c_mode_base()
    dist.init_process_group("fake", rank=0, world_size=WORLD, store=FakeStore())
    try:
        mesh = parity.DeviceMesh((WORLD,), ("x",))
        host = np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32)
        a = ti.distribute_tensor(host, parity.TensorLayout(("x", None), mesh))
        b = ti.distribute_tensor(host, parity.TensorLayout(("x", None), mesh))

        def add():
            return a + b

        rows = [("python_mode", "a TorchFunctionMode (Python) that only calls the op",
                 PythonCallOnly)]
        if c_base is not None:
            rows.append(("c_mode", "a TorchFunctionMode whose __torch_function__ is C, "
                         "only calling the op", type("CCallOnly", (c_base, TorchFunctionMode), {})))
        rows += [("dispatch_mode", "a TorchDispatchMode that only calls the op",
                  DispatchCallOnly),
                 ("jax_semantics", "parity's jax_semantics(), signature proven clean",
                  ti.jax_semantics),
                 ("registered_rule", "no mode: JAX's add rule registered as DTensor's "
                  "strategy (register_sharding)", _registered_add_rule)]
        found = []
        with torch.no_grad():
            for case, note, scope in rows:
                with scope():
                    out = add()
                    assert tuple(out.placements) == tuple(a.placements), (case, out.placements)
                mine, raw = best_pair(add, add, calls, blocks, scope)
                found.append({"case": case, "parity_s": mine, "raw_s": raw, "note": note})
        if c_base is None:
            found.append({"case": "c_mode", "parity_s": None, "raw_s": None,
                          "note": f"not available: {c_missing}"})
        return found
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    calls = 200 if "--quick" in argv else CALLS
    for row in measure(calls):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
