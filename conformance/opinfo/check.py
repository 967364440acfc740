"""One OpInfo case, run and classified: the op on sharded DTensors against the
same op on the unsharded tensors.

Must run inside ``parity.torch_impl.simulate(n)`` (``conformance.opinfo.harness``'s
worker and ``check_ops`` enter it). Classes (``CLASSES``), first that applies:

* ``skip``: no case to run (the reference itself raises, nothing shardable,
  no floating output to differentiate...); ``reason`` says why;
* ``parity-error``: a ``parity.ParityError`` (a clear refusal), reason = its
  message;
* ``raw-error``: any other exception (type and first line of the message,
  and the stage: distribute / forward / backward / readback);
* ``wrong-values``: an output's or a gradient's dtype, shape or values
  differ from the reference on some rank (tolerances: ``op_tolerance``);
* ``leaked-partial``: an output or gradient is a DTensor with a ``Partial``
  placement that ``describe`` reports pending (a pending sum the user can
  read locally; a sum ``jax_semantics()`` keeps pending is completed by
  every read);
* ``wrong-grad-placement``: a sharded input's gradient does not have that
  input's placement;
* ``correct``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

import parity
from conformance.opinfo.samples import plain_mode, tensor_leaves
from conformance.running.run_torch import raw_placements
from parity.errors import ParityError

CLASSES = ("correct", "wrong-values", "wrong-grad-placement", "leaked-partial",
           "parity-error", "raw-error", "skip")
MODES = ("sharded", "mixed", "grad")
COLUMNS = ("parity", "dtensor")
# float32 on CPU: sharding changes the order of sums, so a little looser
# than torch's assertEqual default (rtol 1.3e-6, atol 1e-5); widened by the
# op's own OpInfo toleranceOverride for float32 (CPU or any device).
BASE_TOL = {"forward": (1e-5, 1e-5), "grad": (1e-4, 1e-4)}


class Finding(Exception):
    """A classified outcome other than ``correct`` (internal control flow)."""

    def __init__(self, cls: str, reason: str) -> None:
        super().__init__(reason)
        self.cls, self.reason = cls, reason


_OVERRIDES: dict[int, tuple[float, float]] = {}


def _overrides(op: Any) -> tuple[float, float]:
    if id(op) not in _OVERRIDES:
        _OVERRIDES[id(op)] = _find_overrides(op)
    return _OVERRIDES[id(op)]


def _find_overrides(op: Any) -> tuple[float, float]:
    rtol = atol = 0.0
    if not getattr(op, "decorators", None):
        return rtol, atol
    from torch.testing._internal.common_device_type import toleranceOverride

    for info in getattr(op, "decorators", ()) or ():
        if getattr(info, "device_type", None) not in (None, "cpu"):
            continue
        for dec in getattr(info, "decorators", (info,)):
            if isinstance(dec, toleranceOverride) and torch.float32 in dec.d:
                atol = max(atol, dec.d[torch.float32].atol)
                rtol = max(rtol, dec.d[torch.float32].rtol)
    return rtol, atol


def op_tolerance(op: Any, kind: str) -> tuple[float, float]:
    """``(rtol, atol)`` for ``kind`` ("forward" or "grad")."""
    rtol, atol = BASE_TOL[kind]
    o_rtol, o_atol = _overrides(op)
    return max(rtol, o_rtol), max(atol, o_atol)


def _error_text(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:300] if lines else ''}"


def _classify_error(stage: str, err: BaseException) -> Finding:
    if isinstance(err, ParityError):
        return Finding("parity-error", f"{stage}: {_error_text(err)}")
    return Finding("raw-error", f"{stage}: {_error_text(err)}")


def _call(op: Any, leaves: list[Any], treespec: Any) -> Any:
    from torch.utils._pytree import tree_unflatten

    inp, args, kwargs = tree_unflatten(leaves, treespec)
    return op(inp, *args, **kwargs)


def _out_leaves(out: Any) -> list[Any]:
    from torch.utils._pytree import tree_flatten

    return tree_flatten(out)[0]


def _loss_terms(op: Any, sample: Any, out: Any) -> list[torch.Tensor]:
    processed = sample.output_process_fn_grad(out)
    return [o for o in _out_leaves(processed)
            if isinstance(o, torch.Tensor) and o.is_floating_point() and o.requires_grad]


def reference(op: Any, sample: Any, leaves: Sequence[Any], treespec: Any,
              grad: bool) -> dict[str, Any]:
    """The op on the unsharded tensors (outside simulated ranks):
    ``{"outputs": [...], "grads": [...] or None}``. Raises what the op raises."""
    with plain_mode():
        inputs = [_plain_copy(x, grad) for x in leaves]
        out = _call(op, inputs, treespec)
        outputs = [o.detach() if isinstance(o, torch.Tensor) else o for o in _out_leaves(out)]
        grads = None
        if grad:
            terms = _loss_terms(op, sample, out)
            if not terms:
                raise Finding("skip", "no floating output that requires grad")
            sum(t.sum() for t in terms).backward()
            grads = [x.grad if isinstance(x, torch.Tensor) and x.requires_grad else None
                     for x in inputs]
    return {"outputs": outputs, "grads": grads}


def _plain_copy(x: Any, grad: bool) -> Any:
    if not isinstance(x, torch.Tensor):
        return x
    y = x.detach().clone()
    if grad and x.requires_grad and y.is_floating_point():
        y.requires_grad_(True)
    return y


def rank_values(x: Any) -> list[Any]:
    """Every simulated rank's full value of ``x`` (DTensor: ``full_tensor``,
    which completes a Partial; LocalTensor: each rank's tensor)."""
    from torch.distributed.tensor import DTensor

    if isinstance(x, DTensor):
        with torch.no_grad():
            x = x.full_tensor()
    local = getattr(x, "_local_tensors", None)
    if local is not None:
        return [local[r] for r in sorted(local)]
    return [x]


def _compare(what: str, got: Any, want: Any, tol: tuple[float, float]) -> None:
    """Raise ``Finding("wrong-values")`` unless ``got`` equals ``want`` on every rank."""
    from torch.distributed.tensor import DTensor

    if not isinstance(want, torch.Tensor):
        if isinstance(got, torch.Tensor) or got != want:
            raise Finding("wrong-values", f"{what}: {got!r} != reference {want!r}")
        return
    if not isinstance(got, torch.Tensor):
        raise Finding("wrong-values", f"{what}: got {type(got).__name__}, reference is a tensor")
    if tuple(got.shape) != tuple(want.shape) or got.dtype != want.dtype:
        raise Finding("wrong-values", f"{what}: {got.dtype}{list(got.shape)} != reference "
                                      f"{want.dtype}{list(want.shape)}")
    rtol, atol = tol
    for rank, value in enumerate(rank_values(got)):
        value = value.detach()
        if tuple(value.shape) != tuple(want.shape):
            raise Finding("wrong-values", f"{what}: rank {rank} holds shape "
                                          f"{list(value.shape)}, reference {list(want.shape)}")
        if want.is_floating_point() or want.is_complex():
            ok = torch.allclose(value, want, rtol=rtol, atol=atol, equal_nan=True)
        else:
            ok = torch.equal(value, want)
        if not ok:
            diff = (value.double() - want.double()).abs() if not want.is_complex() else \
                (value - want).abs()
            where = "" if isinstance(got, DTensor) else " (plain tensor)"
            raise Finding("wrong-values", f"{what}{where}: rank {rank} max |diff| "
                                          f"{float(diff.nan_to_num(float('inf')).max()):.3g} "
                                          f"(rtol {rtol:g}, atol {atol:g})")


def _partial(x: Any) -> bool:
    """Whether ``x`` holds a pending sum a user can read: a ``Partial``
    placement that ``describe`` reports pending. Under ``jax_semantics()``
    a sum kept pending through linear ops is completed by ``describe``,
    ``to_local()`` and every value read, so it is no leak."""
    from torch.distributed.tensor import DTensor

    from parity.torch_impl import describe

    return (isinstance(x, DTensor) and any(p.is_partial() for p in x.placements)
            and bool(describe(x).pending))


class Distributor:
    """Lays out host tensors for one column on one mesh."""

    def __init__(self, column: str, mesh_shape: Sequence[int], axis_names: Sequence[str]) -> None:
        from parity import torch_impl as ti

        self.column, self.ti = column, ti
        self.mesh = parity.DeviceMesh(tuple(mesh_shape), tuple(axis_names),
                                      ti.list_devices()[: int(torch.tensor(mesh_shape).prod())])
        self.torch_mesh = ti.to_torch_mesh(self.mesh)

    def __call__(self, x: torch.Tensor, spec) -> Any:
        layout = parity.TensorLayout(tuple(e if e else None for e in spec), self.mesh)
        host = x.detach().clone()
        if self.column == "parity":
            return self.ti.distribute_tensor(host, layout)
        from torch.distributed.tensor import distribute_tensor

        return distribute_tensor(host, self.torch_mesh, raw_placements(layout))

    def same_placement(self, grad: Any, leaf: Any) -> bool:
        if self.column == "parity":
            return self.ti.describe(grad).spec == self.ti.describe(leaf).spec
        return tuple(grad.placements) == tuple(leaf.placements)


def run_case(op: Any, sample: Any, specs: Sequence[Any], mode: str, column: str,
             dist: Distributor, ref: dict[str, Any],
             semantics: Callable[[], Any] | None) -> tuple[str, str]:
    """Run one case; ``(class, reason)``. ``specs[i]`` is leaf i's spec,
    ``None`` for a plain operand (non-tensor leaves: ``None``)."""
    leaves, treespec = sample_leaves(sample)
    grad = mode == "grad"
    try:
        inputs, grad_leaves = [], []
        try:
            for x, spec in zip(leaves, specs):
                if not isinstance(x, torch.Tensor):
                    inputs.append(x)
                    continue
                y = x.detach().clone() if spec is None else dist(x, spec)
                if grad and x.requires_grad and y.is_floating_point():
                    y = y.detach().requires_grad_(True)
                    grad_leaves.append(len(inputs))
                inputs.append(y)
        except Exception as err:  # noqa: BLE001 - the harness's own layout step
            raise _classify_error("distribute", err) from None
        context = semantics() if semantics is not None else contextlib.nullcontext()
        stage = "forward"
        try:
            with context:
                out = _call(op, inputs, treespec)
                stage = "backward"
                if grad:
                    terms = _loss_terms(op, sample, out)
                    if not terms:
                        raise Finding("wrong-values", "no floating output requires grad "
                                                      "(the reference has one)")
                    sum(t.sum() for t in terms).backward()
        except Finding:
            raise
        except Exception as err:  # noqa: BLE001 - every failure is a recorded class
            raise _classify_error(stage, err) from None
        fwd_tol, grad_tol = op_tolerance(op, "forward"), op_tolerance(op, "grad")
        try:
            outputs = _out_leaves(out)
            if len(outputs) != len(ref["outputs"]):
                raise Finding("wrong-values", f"{len(outputs)} outputs, reference "
                                              f"{len(ref['outputs'])}")
            for i, (got, want) in enumerate(zip(outputs, ref["outputs"])):
                _compare(f"output {i}", got, want, fwd_tol)
            if any(_partial(o) for o in outputs):
                raise Finding("leaked-partial", "output placements " + ", ".join(
                    str(tuple(o.placements)) for o in outputs if _partial(o)))
            if grad:
                _check_grads(inputs, grad_leaves, ref["grads"], grad_tol, dist)
        except Finding:
            raise
        except Exception as err:  # noqa: BLE001 - reading results back failed
            raise _classify_error("readback", err) from None
    except Finding as finding:
        return finding.cls, finding.reason
    return "correct", ""


def _check_grads(inputs, grad_leaves, ref_grads, tol, dist: Distributor) -> None:
    from torch.distributed.tensor import DTensor

    for i in grad_leaves:
        leaf, want = inputs[i], ref_grads[i]
        got = leaf.grad
        if want is None:
            want = torch.zeros(leaf.shape, dtype=leaf.dtype)
        if got is None:
            if torch.count_nonzero(want) == 0:
                continue
            raise Finding("wrong-values", f"grad of input {i}: None, reference nonzero")
        _compare(f"grad of input {i}", got, want, tol)
        if _partial(got):
            raise Finding("leaked-partial", f"grad of input {i}: {tuple(got.placements)}")
        if isinstance(leaf, DTensor):
            if not isinstance(got, DTensor):
                raise Finding("wrong-grad-placement",
                              f"grad of input {i} is a {type(got).__name__}, input is a DTensor "
                              f"{tuple(leaf.placements)}")
            if not dist.same_placement(got, leaf):
                raise Finding("wrong-grad-placement", f"grad of input {i}: "
                              f"{tuple(got.placements)}, input {tuple(leaf.placements)}")


def sample_leaves(sample: Any) -> tuple[list[Any], Any]:
    """Leaves and tree spec of a sample's ``(input, args, kwargs)``."""
    return tensor_leaves(sample)


def timed(fn: Callable[[], tuple[str, str]]) -> tuple[str, str, float]:
    """``fn()`` and its wall time in seconds."""
    start = time.perf_counter()
    cls, reason = fn()
    return cls, reason, round(time.perf_counter() - start, 4)
