"""Run one case on torch: the parity column or the raw DTensor column.
Never imports jax.

* parity (default): inputs laid out by ``parity.torch_impl.distribute_tensor``,
  the op runs under ``parity.torch_impl.jax_semantics()`` (the header says
  ``"semantics": "jax_semantics"``), outputs read by ``describe`` /
  ``to_numpy``. Without ``jax_semantics`` the worker does not start: the
  parity column never quietly runs plain DTensor.
* raw (``--raw``): what a user gets from DTensor alone. Inputs by
  ``torch.distributed.tensor.distribute_tensor`` with public placements only:
  ``Shard(d)`` on every mesh axis of dim ``d``, ``Replicate()`` elsewhere.
  Public DTensor applies mesh dims in mesh order, so a dim over several axes
  written minor-major (``("model", "data")`` on a ``("data", "model")`` mesh)
  lands as ``("data", "model")``: a placement difference, as a user would
  get it (only the private ``_StridedShard`` expresses the other order).
  Plain torch calls, outputs read from the DTensor's placements (``Partial``
  -> ``pending``), values by ``full_tensor()``. Indivisible dims split
  unevenly without an error, as DTensor does. SPEC's collectives have no
  DTensor equivalent: the raw column reports them ``unsupported``.

Only public functions of ``parity.torch_impl`` are used. Outputs carry
``"rule": null``.
"""

from __future__ import annotations

import contextlib
import sys
import types
from typing import Any

import numpy as np
import torch

import parity
from conformance.catalogue import Op
from conformance.records.values import host_values
from conformance.running.case_runner import CaseRunner, array_record, spec_entries


def setup(n_devices: int, device: str = "cpu", raw: bool = False) -> tuple[contextlib.ExitStack, dict]:
    """Enter ``torch_impl.simulate(n)`` for the worker's life; header facts."""
    from parity import torch_impl

    torch.set_num_threads(1)
    stack = contextlib.ExitStack()
    stack.enter_context(torch_impl.simulate(n_devices, device=device))
    facts = {"semantics": "raw-dtensor" if raw else "jax_semantics",
             "versions": {"torch": torch.__version__}}
    if device == "cuda":
        facts["tf32"] = {"matmul": torch.backends.cuda.matmul.allow_tf32,
                         "cudnn": torch.backends.cudnn.allow_tf32}
        facts["gpu"] = torch.cuda.get_device_name(0)
    return stack, facts


class TorchRunner(CaseRunner):
    """Executes case dicts and returns report entries (parity or raw column)."""

    def __init__(self, n_devices: int, device: str = "cpu", raw: bool = False) -> None:
        import torch.nn.functional as F

        from parity import torch_impl
        from parity.torch_impl import jax_semantics  # the parity column's whole point

        self.ti = self.backend = torch_impl
        self.raw = raw
        self.device = device
        self.n = n_devices
        self.semantics = contextlib.nullcontext if raw else jax_semantics
        self.api = _RawApi(self) if raw else torch_impl
        self.ns = {"torch": torch, "F": F, "np": np, "B": self.api}

    def host_tensor(self, host: np.ndarray) -> torch.Tensor:
        """Host values as a plain tensor on this process's device."""
        return torch.from_numpy(np.ascontiguousarray(host)).to(self.ti.torch_device())

    def distribute(self, host: np.ndarray, entries, mesh):
        if not self.raw:
            return self.ti.distribute_tensor(host, self.layout(entries, mesh))
        from torch.distributed.tensor import distribute_tensor

        placements = raw_placements(self.layout(entries, mesh))
        return distribute_tensor(self.host_tensor(host), self.ti.to_torch_mesh(mesh), placements)

    def _execute(self, case: dict[str, Any], op: Op) -> dict[str, Any]:
        if op.group == "explicit":
            return self._run_explicit(case, op)
        mesh = self.mesh(case)
        kwargs = dict(case.get("kwargs", {}))
        if "target" in kwargs:
            kwargs["target"] = self.layout(kwargs["target"], mesh)
        want_grad = bool(case.get("grad")) and op.grad
        args, grad_leaves = [], []
        for i, (item, host) in enumerate(zip(case["inputs"], host_values(case))):
            if "scalar" in item:
                args.append(item["scalar"])
                continue
            if item.get("layout") is None:
                x = host if op.group == "api" else self.host_tensor(host)
            else:
                x = self.distribute(host, item["layout"], mesh)
            if want_grad and isinstance(x, torch.Tensor) and x.is_floating_point():
                x = x.detach().requires_grad_(True)
                grad_leaves.append((i, x))
            args.append(x)
        fn = op.compile("torch", self.ns, list(kwargs), raw=self.raw)
        leaves = self.call(fn, args, kwargs, bool(grad_leaves))
        outputs = [self.record(o) for o in leaves]
        return {"outputs": outputs, "grads": _grad_records(grad_leaves, self.record)}

    def _run_explicit(self, case: dict[str, Any], op: Op) -> dict[str, Any]:
        """Group ``explicit``: under ``set_mesh`` of the case's mesh (its own
        axis types), operands by ``device_put(host, P(...))``, the op through
        ``call`` (so the compiled column compiles it); every output and
        gradient records ``str(typeof(x))``. The raw column has no typeof:
        it reports these ``unsupported``."""
        if self.raw:
            raise parity.UnsupportedOpError(
                f"plain DTensor has no explicit sharding types ({op.name}); parity provides them",
                op=op.name, reason="no DTensor equivalent")
        mesh = self.mesh(case)
        kwargs = dict(case.get("kwargs", {}))
        if "target" in kwargs:
            kwargs["target"] = spec_entries(kwargs["target"])
        want_grad = bool(case.get("grad")) and op.grad
        fn = op.compile("torch", _explicit_namespace(self.ns), list(kwargs))
        with self.ti.set_mesh(mesh):
            args = []
            for item, host in zip(case["inputs"], host_values(case)):
                x = self.ti.device_put(host, parity.P(*spec_entries(item["layout"])))
                args.append(x.detach().requires_grad_(True) if want_grad else x)
            leaves = self.call(fn, args, kwargs, want_grad)
        outputs = [self._typed(o) for o in leaves]
        grad_leaves = list(enumerate(args)) if want_grad else []
        return {"outputs": outputs, "grads": _grad_records(grad_leaves, self._typed)}

    def _typed(self, x) -> dict[str, Any]:
        rec = self.record(x)
        rec["type"] = str(self.ti.typeof(x))
        return rec

    def call(self, fn, args: list, kwargs: dict, grad: bool) -> list:
        """The op's outputs as a list; with ``grad``, ``sum(outputs)`` is
        differentiated too (``conformance.running.run_compiled`` compiles this)."""
        with self.semantics():
            out = fn(*args, **kwargs)
            leaves = list(out) if isinstance(out, (tuple, list)) else [out]
            if grad:
                total = sum(leaf.sum() for leaf in leaves)
                total.backward()
        return leaves

    def record(self, x) -> dict[str, Any]:
        """Report form (``records.array_record``, rule null). A raw DTensor
        whose placements no PartitionSpec describes records them as text."""
        from torch.distributed.tensor import DTensor

        if not isinstance(x, DTensor):
            values = self.ti.to_numpy(x) if isinstance(x, torch.Tensor) else np.asarray(x)
            return array_record(values, None, None)
        values = self._values(x)
        try:
            placement = self.ti.describe(x)
        except parity.LayoutError as err:  # e.g. a _StridedShard order: only raw DTensor
            rec = array_record(values, None, None)
            rec.update({"shape": list(x.shape), "placements": str(tuple(x.placements)),
                        "describe_error": str(err)[:300]})
            return rec
        return array_record(values, placement, None)

    def _values(self, x) -> np.ndarray:
        if not self.raw:
            return self.ti.to_numpy(x)
        full = x.full_tensor()  # raw: DTensor's own gather (reduces a Partial)
        local_tensors = getattr(full, "_local_tensors", None)
        if local_tensors is not None:  # LocalTensor (simulated ranks): rank 0's copy
            full = local_tensors[min(local_tensors)]
        return full.detach().cpu().numpy()


def _grad_records(grad_leaves, record) -> list[dict[str, Any]]:
    """One record per ``(input index, leaf)`` of its gradient (``record(leaf.grad)``
    with ``"input"`` set); raises ``RuntimeError`` for a leaf the backward left
    without one."""
    grads = []
    for index, leaf in grad_leaves:
        if leaf.grad is None:
            raise RuntimeError(f"backward left no gradient for input {index}")
        rec = record(leaf.grad)
        rec["input"] = index
        grads.append(rec)
    return grads


def _explicit_namespace(ns: dict) -> dict:
    """``ns`` and ``P`` as the globals of a real module (registered in
    ``sys.modules``): dynamo (the compiled column) looks the globals of the
    body lambda a ``shard_map`` expression defines up through its
    ``__name__``."""
    name = "conformance._explicit_expressions"
    module = sys.modules.get(name)
    if module is None:
        module = sys.modules[name] = types.ModuleType(name)
    module.__dict__.update(ns)
    module.P = parity.P
    return module.__dict__


def raw_placements(layout) -> list:
    """Public DTensor placements for a layout: ``Shard(d)`` on each mesh axis
    that splits dim ``d`` (applied in mesh order), ``Replicate()`` elsewhere."""
    from torch.distributed.tensor import Replicate, Shard

    mesh = layout.require_mesh()
    placements = [Replicate() for _ in mesh.axis_names]
    for dim, names in enumerate(layout.spec):
        for name in names:
            placements[mesh.axis_index(name)] = Shard(dim)
    return placements


class _RawApi:
    """SPEC's API functions as plain DTensor offers them (``--raw``)."""

    def __init__(self, runner: TorchRunner) -> None:
        self.r = runner

    def _placements(self, layout):
        return raw_placements(layout)

    def distribute_tensor(self, x, layout):
        from torch.distributed.tensor import DTensor, distribute_tensor

        mesh = layout.require_mesh()
        if isinstance(x, DTensor):
            return x.redistribute(x.device_mesh, self._placements(layout))
        return distribute_tensor(self.r.host_tensor(x), self.r.ti.to_torch_mesh(mesh),
                                 self._placements(layout))

    def distribute_data_input(self, x, layout, batch_dim_name=None):
        return self.distribute_tensor(x, layout)

    def all_gather_variable(self, x):
        from torch.distributed.tensor import Replicate

        return x.redistribute(x.device_mesh, [Replicate()] * x.device_mesh.ndim)

    def _none(self, name):
        raise parity.UnsupportedOpError(
            f"plain DTensor has no {name} over one named mesh axis with shard_map "
            "meaning (reduce each device's local block); parity provides it",
            op=name, reason="no DTensor equivalent")

    def all_reduce(self, x, op="sum", axis_name=None):
        self._none("all_reduce")

    def all_gather(self, x, axis, axis_name):
        self._none("all_gather")

    def reduce_scatter(self, x, axis, axis_name, op="sum"):
        self._none("reduce_scatter")
