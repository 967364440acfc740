"""torch's ``_foreach_*`` ops over tensors on several meshes: one call per
mesh, as JAX's ``tree_map`` of an elementwise op lays each element out on
its own mesh.

A foreach op is the elementwise op applied to the i-th element of each of
its list operands. torch's optimizers (Adam, AdamW, SGD... with
``foreach=True``, their default on CUDA) and ``clip_grad_norm_`` hand one
call every parameter of a device, and FSDP2 + TP puts those parameters on
two meshes (the 2-D ``(dp, tp)`` mesh for the tensor-parallel weights, its
``dp`` submesh for the rest): the mode's one-mesh rule refused the call
with ``MeshMismatchError`` (pytorch#134212 is plain DTensor's form of it).
``split`` groups the elements by their DTensors' mesh (meshes that are the
same mesh for JAX are one group; an element with no DTensor joins the
first group, as it was promoted before) and ``joined`` puts the per-group
results back in element order. A mesh and its slice (FSDP2's ``dp``
submesh) are two groups, so each element keeps its mesh; an operand on the
parent that a group meets (``clip_grad_norm_``'s coefficient in
``_foreach_mul_``) lifts the group's elements onto the parent
(``operands.find_mesh``, ``layouts/submesh.py``), writing into their blocks.
"""

from __future__ import annotations

from typing import Any

from torch.distributed.tensor import DTensor

from parity.torch_impl.semantics.operands import same_mesh

_SEQ = (list, tuple)


def split(args: tuple, kwargs: dict) -> list[tuple[list[int], tuple, dict]] | None:
    """``[(indices, args, kwargs), ...]``: the call cut into one call per
    mesh its elements live on (each list operand of the call's length
    reduced to the group's elements; other operands as they are), or
    ``None`` when every element's DTensors share one mesh (or there are no
    list operands)."""
    lists = [a for a in (*args, *kwargs.values()) if isinstance(a, _SEQ)]
    if not lists:
        return None
    n = len(lists[0])
    meshes: list[Any] = []
    group_of: list[int | None] = []
    for i in range(n):
        mesh = next((lst[i].device_mesh for lst in lists
                     if len(lst) == n and isinstance(lst[i], DTensor)), None)
        if mesh is None:
            group_of.append(None)
            continue
        for g, seen in enumerate(meshes):
            if same_mesh(seen, mesh):
                group_of.append(g)
                break
        else:
            meshes.append(mesh)
            group_of.append(len(meshes) - 1)
    if len(meshes) < 2:
        return None
    groups: list[list[int]] = [[] for _ in meshes]
    for i, g in enumerate(group_of):
        groups[0 if g is None else g].append(i)

    def cut(value: Any, indices: list[int]) -> Any:
        if isinstance(value, _SEQ) and len(value) == n:
            return type(value)(value[i] for i in indices)
        return value

    return [(indices, tuple(cut(a, indices) for a in args),
             {k: cut(v, indices) for k, v in kwargs.items()}) for indices in groups]


def joined(parts: list[tuple[list[int], tuple, dict]], results: list[Any]) -> Any:
    """The per-group ``results`` of ``split``'s ``parts`` as one call's result:
    ``None`` for an in-place op, else a list in element order."""
    if all(r is None for r in results):
        return None
    out: list[Any] = [None] * sum(len(indices) for indices, _, _ in parts)
    for (indices, _, _), result in zip(parts, results):
        for i, value in zip(indices, result):
            out[i] = value
    return out
