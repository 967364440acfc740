"""Run one case on torch: the parity column or the raw DTensor column.
Never imports jax.

* parity (default): inputs laid out by ``parity.torch_impl.distribute_tensor``,
  the op runs under ``parity.torch_impl.jax_semantics()`` when that exists
  (the header says ``"semantics": "jax_semantics"``; otherwise ``"none"`` and
  the op runs on plain DTensor), outputs read by ``describe`` / ``to_numpy``.
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

Outputs carry ``"rule": null``.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import numpy as np
import torch

from conformance.catalogue import GRAD_CLASS, get_op, tolerance
from conformance.errors import error_record
from conformance.values import encode, host_values


def setup(n_devices: int, device: str = "cpu", raw: bool = False) -> tuple[contextlib.ExitStack, dict]:
    """Enter ``torch_impl.simulate(n)`` for the worker's life; header facts."""
    from parity import torch_impl

    torch.set_num_threads(1)
    stack = contextlib.ExitStack()
    stack.enter_context(torch_impl.simulate(n_devices, device=device))
    semantics = "raw-dtensor" if raw else (
        "jax_semantics" if getattr(torch_impl, "jax_semantics", None) else "none")
    facts = {"semantics": semantics, "versions": {"torch": torch.__version__}}
    if device == "cuda":
        facts["tf32"] = {"matmul": torch.backends.cuda.matmul.allow_tf32,
                         "cudnn": torch.backends.cudnn.allow_tf32}
        facts["gpu"] = torch.cuda.get_device_name(0)
    return stack, facts


class TorchRunner:
    """Executes case dicts and returns report entries (parity or raw column)."""

    def __init__(self, n_devices: int, device: str = "cpu", raw: bool = False) -> None:
        import torch.nn.functional as F

        from parity import torch_impl

        self.ti = torch_impl
        self.raw = raw
        self.device = device
        self.n = n_devices
        self.semantics = None if raw else getattr(torch_impl, "jax_semantics", None)
        self.api = _RawApi(self) if raw else torch_impl
        self.ns = {"torch": torch, "F": F, "np": np, "B": self.api}

    def mesh(self, case):
        import parity

        shape = tuple(case["mesh"]["shape"])
        n = int(np.prod(shape))
        devices = self.ti.list_devices()[:n]
        return parity.DeviceMesh(shape, tuple(case["mesh"]["axis_names"]), devices)

    def layout(self, entries, mesh):
        import parity

        return parity.TensorLayout(tuple(tuple(e) if isinstance(e, list) else e for e in entries), mesh)

    def distribute(self, host: np.ndarray, entries, mesh):
        if not self.raw:
            return self.ti.distribute_tensor(host, self.layout(entries, mesh))
        from torch.distributed.tensor import distribute_tensor

        placements = raw_placements(self.layout(entries, mesh))
        tensor = torch.from_numpy(np.ascontiguousarray(host)).to(self.ti.runtime.torch_device())
        return distribute_tensor(tensor, self.ti.to_torch_mesh(mesh), placements)

    def run(self, case: dict[str, Any]) -> dict[str, Any]:
        start = time.perf_counter()
        op = get_op(case["op"])
        entry: dict[str, Any] = {"status": "ok", "error": None, "outputs": [], "grads": []}
        try:
            entry.update(self._run(case, op))
        except Exception as err:  # noqa: BLE001 - every failure is a recorded result
            entry = {"status": "error", "error": error_record(err), "outputs": [], "grads": []}
        dtype = entry["outputs"][0]["dtype"] if entry["outputs"] else "float32"
        entry["tolerance"] = tolerance(op.tol, self.device, dtype)
        if case.get("grad"):
            entry["grad_tolerance"] = tolerance(GRAD_CLASS[op.tol], self.device)
        entry["seconds"] = round(time.perf_counter() - start, 4)
        return entry

    def _run(self, case, op) -> dict[str, Any]:
        mesh = self.mesh(case)
        kwargs = dict(case.get("kwargs", {}))
        if "target" in kwargs:
            kwargs["target"] = self.layout(kwargs["target"], mesh)
        want_grad = bool(case.get("grad")) and op.grad
        args, grad_leaves = [], []
        device = self.ti.runtime.torch_device()
        for i, (item, host) in enumerate(zip(case["inputs"], host_values(case))):
            if "scalar" in item:
                args.append(item["scalar"])
                continue
            if item.get("layout") is None:
                x = host if op.group == "api" else torch.from_numpy(np.ascontiguousarray(host)).to(device)
            else:
                x = self.distribute(host, item["layout"], mesh)
            if want_grad and isinstance(x, torch.Tensor) and x.is_floating_point():
                x = x.detach().requires_grad_(True)
                grad_leaves.append((i, x))
            args.append(x)
        fn = op.compile("torch", self.ns, list(kwargs), raw=self.raw)
        context = self.semantics() if self.semantics else contextlib.nullcontext()
        with context:
            out = fn(*args, **kwargs)
            leaves = list(out) if isinstance(out, (tuple, list)) else [out]
            if grad_leaves:
                total = sum(leaf.sum() for leaf in leaves)
                total.backward()
        outputs = [self.record(o) for o in leaves]
        grads = []
        for index, leaf in grad_leaves:
            if leaf.grad is None:
                raise RuntimeError(f"backward left no gradient for input {index}")
            rec = self.record(leaf.grad)
            rec["input"] = index
            grads.append(rec)
        return {"outputs": outputs, "grads": grads}

    def record(self, x) -> dict[str, Any]:
        """Report form: shape, dtype, spec, shards, pending, rule (null), values."""
        from torch.distributed.tensor import DTensor

        if isinstance(x, DTensor):
            values = self._values(x)
            try:
                placement = self.ti.describe(x).to_json()
            except ValueError as err:  # placements no PartitionSpec describes
                rec = {"shape": list(x.shape), "dtype": values.dtype.name, "spec": None,
                       "shards": None, "pending": [], "placements": str(tuple(x.placements)),
                       "describe_error": str(err)[:300]}
            else:
                rec = {"shape": placement["shape"], "dtype": values.dtype.name,
                       "spec": placement["spec"], "shards": placement["shards"],
                       "pending": placement["pending"]}
        else:
            values = self.ti.to_numpy(x) if isinstance(x, torch.Tensor) else np.asarray(x)
            rec = {"shape": list(values.shape), "dtype": values.dtype.name,
                   "spec": None, "shards": None, "pending": []}
        rec["rule"] = None
        rec["values"] = encode(values)
        return rec

    def _values(self, x) -> np.ndarray:
        if not self.raw:
            return self.ti.to_numpy(x)
        full = x.full_tensor()  # raw: DTensor's own gather (reduces a Partial)
        local_tensors = getattr(full, "_local_tensors", None)
        if local_tensors is not None:
            full = local_tensors[min(local_tensors)]
        return full.detach().cpu().numpy()


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
        tensor = torch.from_numpy(np.ascontiguousarray(x)).to(self.r.ti.runtime.torch_device())
        return distribute_tensor(tensor, self.r.ti.to_torch_mesh(mesh), self._placements(layout))

    def distribute_data_input(self, x, layout, batch_dim_name=None):
        return self.distribute_tensor(x, layout)

    def all_gather_variable(self, x):
        from torch.distributed.tensor import Replicate

        return x.redistribute(x.device_mesh, [Replicate()] * x.device_mesh.ndim)

    def _none(self, name):
        raise NotImplementedError(
            f"plain DTensor has no {name} over one named mesh axis with shard_map "
            "meaning (reduce each device's local block); parity provides it")

    def all_reduce(self, x, op="sum", axis_name=None):
        self._none("all_reduce")

    def all_gather(self, x, axis, axis_name):
        self._none("all_gather")

    def reduce_scatter(self, x, axis, axis_name, op="sum"):
        self._none("reduce_scatter")
