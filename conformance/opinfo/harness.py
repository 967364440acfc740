"""The torch-oracle column: PyTorch's OpInfo samples on sharded DTensors,
checked against the same op on the unsharded tensors.

For every float32 OpInfo in ``torch.testing._internal.common_methods_invocations.op_db``
(needs the ``expecttest`` package), every selected sample and mesh
((2, 4) and (2, 2, 2), simulated by ``parity.torch_impl.simulate(8)``), each
layout *scheme* (``opinfo_samples``: how the shape policy makes samples
shardable and which dims each scheme shards) runs in three modes:

* ``sharded``: every tensor operand laid out by the scheme (a tensor the
  scheme does not fit is a replicated DTensor);
* ``mixed``: the first shardable operand laid out, every other one a plain
  tensor (samples with at least two tensor operands);
* ``grad``: as ``sharded``, then backward of the sum of the floating outputs
  (after OpInfo's ``output_process_fn_grad``); each sharded input's gradient
  must equal the reference gradient and have that input's placement;

in two columns: ``parity`` (inputs by ``parity.torch_impl.distribute_tensor``,
op under ``jax_semantics()``) and ``dtensor`` (inputs by DTensor's own
``distribute_tensor``, no parity). Each case gets one class of
``opinfo_check.CLASSES`` (see there for the order of the checks).

In-process use (what a developer fixing an op runs)::

    from conformance.opinfo.harness import check_ops
    records = check_ops(["cumsum", "amax"], meshes=("2x4",), columns=("parity",))
    print_table(summarize(records))
    [r for r in records if r["class"] not in ("correct", "skip")]

Record format (one dict per case; ``parity run --source opinfo`` writes them
under ``"cases"``; ``opinfo_report`` documents the file)::

    {"op": "cumsum", "sample": 0, "mesh": "2x4", "layout": "first",
     "specs": ["(data,_)", "plain"], "mode": "sharded", "column": "parity",
     "class": "correct", "reason": "", "seconds": 0.012,
     "shapes": [[8, 4]], "call": "(T[8, 4], dim=1)", "shape_policy": "rescaled",
     "index": 3}

``specs`` has one entry per tensor operand (``plain`` = not a DTensor);
``index`` is the case's position in its op's deterministic enumeration
(a worker restarted after a timeout resumes there); skip records of a whole
op or sample have ``"sample": null`` / ``"layout": null`` as applicable.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from conformance.opinfo.check import (CLASSES, COLUMNS, MODES, Distributor, Finding, reference,
                                     run_case, timed)
from conformance.opinfo.samples import (
    ALL_SCHEMES,
    MESHES,
    float32_ops,
    op_key,
    samples,
    scheme_spec,
    skip_reason,
    spec_text,
    tensor_leaves,
)


@dataclasses.dataclass(frozen=True)
class Budget:
    """How much of each op runs: samples per mode and layout schemes."""

    forward_samples: int
    grad_samples: int
    schemes: int  # layouts per sample: the first schemes that shard something


FAST = Budget(forward_samples=2, grad_samples=1, schemes=2)
FULL = Budget(forward_samples=12, grad_samples=6, schemes=len(ALL_SCHEMES))


def _shardable(leaves: Sequence[Any], mesh_shape: Sequence[int]) -> bool:
    import torch

    return any(isinstance(x, torch.Tensor) and any(s > 0 and s % mesh_shape[0] == 0
                                                   for s in x.shape) for x in leaves)


def _specs(leaves, scheme, mesh_shape, names, mode) -> list[Any] | None:
    """Spec per leaf (``None``: plain or not a tensor); ``None`` overall when
    nothing is sharded."""
    import torch

    specs: list[Any] = []
    sharded_one = False
    for x in leaves:
        if not isinstance(x, torch.Tensor):
            specs.append(None)
            continue
        if mode == "mixed" and sharded_one:
            specs.append(None)
            continue
        spec = scheme_spec(tuple(x.shape), scheme, mesh_shape, names)
        if spec is None:
            specs.append(None if mode == "mixed" else tuple(() for _ in x.shape))
            continue
        specs.append(spec)
        sharded_one = True
    return specs if sharded_one else None


def _layouts(leaves, count: int, mesh_shape, names, mode) -> list[tuple[str, list[Any]]]:
    """Up to ``count`` ``(scheme, specs)`` pairs, in ``ALL_SCHEMES`` order,
    that shard some operand and differ from each other."""
    found: list[tuple[str, list[Any]]] = []
    for scheme in ALL_SCHEMES:
        specs = _specs(leaves, scheme, mesh_shape, names, mode)
        if specs is not None and all(specs != other for _, other in found):
            found.append((scheme, specs))
        if len(found) == count:
            break
    return found


def op_cases(op: Any, *, budget: Budget = FAST, meshes: Sequence[str] = tuple(MESHES),
             modes: Sequence[str] = MODES, columns: Sequence[str] = COLUMNS,
             start: int = 0, on_begin: Callable[[dict], None] | None = None,
             semantics: Callable[[], Any] | None = None) -> Iterator[dict[str, Any]]:
    """Run one OpInfo's cases (inside ``simulate(8)``); yield a record each.

    ``start`` skips the first cases of the enumeration (not run, not
    yielded); ``on_begin(record)`` is called before each case runs with the
    record minus its result. ``semantics`` is parity's ``jax_semantics``
    (default: imported). Raises ``KeyError`` for an unknown mode or column.
    """
    for m in modes:
        if m not in MODES:
            raise KeyError(f"unknown mode {m!r}; modes: {MODES}")
    for c in columns:
        if c not in COLUMNS:
            raise KeyError(f"unknown column {c!r}; columns: {COLUMNS}")
    if semantics is None:
        from parity.torch_impl import jax_semantics as semantics
    key = op_key(op)
    index = -1

    def record(**fields) -> dict[str, Any]:
        base = {"op": key, "sample": None, "mesh": None, "layout": None, "specs": [],
                "mode": None, "column": None, "class": "skip", "reason": "", "seconds": 0.0,
                "shapes": [], "call": None, "shape_policy": None, "index": index}
        base.update(fields)
        return base

    why = skip_reason(op)
    if why is not None:
        index += 1
        if index >= start:
            yield record(reason=why)
        return
    cache: dict[bool, tuple[list[Any], str]] = {}
    for mesh_tag in meshes:
        mesh_shape, names = MESHES[mesh_tag]
        dists = {c: Distributor(c, mesh_shape, names) for c in columns}
        for mode in modes:
            grad = mode == "grad"
            if grad and not op.supports_autograd:
                index += 1
                if index >= start:
                    yield record(mesh=mesh_tag, mode=mode, reason="op does not support autograd")
                continue
            if grad not in cache:
                cache[grad] = samples(op, requires_grad=grad)
            all_samples, policy = cache[grad]
            wanted = budget.grad_samples if grad else budget.forward_samples
            chosen = [(i, s) for i, s in enumerate(all_samples)
                      if _shardable(tensor_leaves(s)[0], mesh_shape)][:wanted]
            if not chosen:
                index += 1
                if index >= start:
                    yield record(mesh=mesh_tag, mode=mode, shape_policy=policy,
                                 reason=f"no sample has a dim divisible by {mesh_shape[0]}")
                continue
            for si, sample in chosen:
                leaves, treespec = tensor_leaves(sample)
                tensors = [x for x in leaves if hasattr(x, "shape")]
                shapes = [list(x.shape) for x in tensors]
                base = dict(sample=si, mesh=mesh_tag, mode=mode, shape_policy=policy,
                            shapes=shapes, call=_call_text(sample))
                if mode == "mixed" and len(tensors) < 2:
                    index += 1
                    if index >= start:
                        yield record(**base, reason="one tensor operand: no mixed case")
                    continue
                ref = None
                layouts = _layouts(leaves, budget.schemes, mesh_shape, names, mode)
                if not layouts:
                    index += 1
                    if index >= start:
                        yield record(**base, reason="no layout scheme shards an operand")
                    continue
                for scheme, specs in layouts:
                    for column in columns:
                        index += 1
                        if index < start:
                            continue
                        fields = dict(base, layout=scheme, column=column,
                                      specs=[spec_text(s) for s, x in zip(specs, leaves)
                                             if hasattr(x, "shape")])
                        if on_begin is not None:
                            on_begin(record(**fields))
                        if ref is None:
                            ref = _reference(op, sample, leaves, treespec, grad)
                        if isinstance(ref, str):
                            yield record(**fields, reason=ref)
                            continue
                        cls, reason, seconds = timed(lambda: run_case(
                            op, sample, specs, mode, column, dists[column], ref,
                            semantics if column == "parity" else None))
                        yield record(**fields, **{"class": cls}, reason=reason, seconds=seconds)


def _call_text(sample: Any) -> str:
    """The sample's call with tensors as ``T[shape]`` (for reading a record)."""
    import torch
    from torch.utils._pytree import tree_map

    def show(x):
        return f"T{list(x.shape)}" if isinstance(x, torch.Tensor) else x

    inp, args, kwargs = tree_map(show, (sample.input, tuple(sample.args), dict(sample.kwargs)))
    parts = [repr(inp), *map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())]
    return ("(" + ", ".join(parts) + ")").replace("'", "")[:300]


def _reference(op, sample, leaves, treespec, grad) -> dict[str, Any] | str:
    """The reference, or the skip reason when the unsharded op itself fails."""
    try:
        return reference(op, sample, leaves, treespec, grad)
    except Finding as finding:
        return finding.reason
    except Exception as err:  # noqa: BLE001 - a sample torch itself rejects is skipped
        return f"reference raised {type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"


def check_ops(names: Sequence[str] = (), *, budget: Budget = FAST,
              meshes: Sequence[str] = tuple(MESHES), modes: Sequence[str] = MODES,
              columns: Sequence[str] = COLUMNS) -> list[dict[str, Any]]:
    """Run the OpInfo cases of ``names`` (all float32 ops when empty) in this
    process under ``simulate(8)``; the list of records. No time limit: use
    ``conformance.opinfo.runner.run_opinfo`` for whole-db runs."""
    from parity import torch_impl as ti

    ops = float32_ops(names)
    records: list[dict[str, Any]] = []
    with ti.simulate(8):
        for op in ops:
            records.extend(op_cases(op, budget=budget, meshes=meshes, modes=modes,
                                    columns=columns))
    return records


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Counts per class: ``{column: {mode: {mesh: {class: n}}}}``. An
    op-level record (no column / mode / mesh: a skipped or abandoned op)
    counts once under every column, mode and mesh the records use."""
    out: dict[str, Any] = {}
    columns = [c for c in COLUMNS if any(r["column"] == c for r in records)] or list(COLUMNS)
    modes = [m for m in MODES if any(r["mode"] == m for r in records)] or list(MODES)
    meshes = [m for m in MESHES if any(r["mesh"] == m for r in records)] or list(MESHES)
    for r in records:
        for column in ([r["column"]] if r["column"] else columns):
            for mode in ([r["mode"]] if r["mode"] else modes):
                for mesh in ([r["mesh"]] if r["mesh"] else meshes):
                    cell = out.setdefault(column, {}).setdefault(mode, {}).setdefault(
                        mesh, {c: 0 for c in CLASSES})
                    cell[r["class"]] += 1
    return out


def print_table(summary: dict[str, Any], file=None) -> None:
    """A plain-text table: one row per (column, mode, mesh), one column per class."""
    file = file or sys.stdout
    head = f"{'column':8} {'mode':8} {'mesh':6} " + " ".join(f"{c:>14}" for c in CLASSES)
    print(head, file=file)
    print("-" * len(head), file=file)
    for column, modes in summary.items():
        for mode, meshes in modes.items():
            for mesh, cell in meshes.items():
                run = sum(v for k, v in cell.items() if k != "skip")
                pct = f" ({100 * cell['correct'] / run:.1f}% of run)" if run else ""
                print(f"{column:8} {mode:8} {mesh:6} "
                      + " ".join(f"{cell[c]:>14}" for c in CLASSES) + pct, file=file)


