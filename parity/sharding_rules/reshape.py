"""Reshapes: a port of JAX's ``_reshape_sharding_rule``.

A reshape keeps the sharding when it only adds or removes size-1 dims;
splits one dim into several (the names go to the leading new dims, each
taking as many mesh axes as divide it); or merges dims of which only a
leading run is sharded. Anything else JAX refuses: ``reshape_spec``
returns ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from parity.layout import Spec
from parity.sharding_rules.basics import AxisSizes


class _Refused(Exception):
    """JAX's rule has no answer for this reshape."""


def reshape_spec(
    shape: Sequence[int], spec: Spec, new_shape: Sequence[int], sizes: AxisSizes
) -> Spec | None:
    """The spec of ``x.reshape(new_shape)`` for ``x`` of ``shape`` laid out
    as ``spec``, or ``None`` where JAX refuses the reshape."""
    shape, new_shape = tuple(shape), tuple(new_shape)
    if all(not n for n in spec):
        return ((),) * len(new_shape)
    if [s for s in shape if s != 1] == [s for s in new_shape if s != 1]:
        it = iter(n for s, n in zip(shape, spec) if s != 1)
        return tuple(() if s == 1 else next(it) for s in new_shape)
    try:
        is_split, out_split = _split_on_one_axis(list(shape), list(new_shape))
        if is_split:
            return _split_spec(spec, out_split, sizes)
        if len(new_shape) < len(shape):
            is_merge, merge = _split_on_one_axis(list(new_shape), list(shape))
            if is_merge:
                return _merge_spec(spec, new_shape, merge, sizes)
    except _Refused:
        return None
    return None


def _split_spec(spec: Spec, out_split: list, sizes: AxisSizes) -> Spec:
    new_spec: list[tuple[str, ...]] = []
    for out, names in zip(out_split, spec):
        if isinstance(out, list):
            if not names:
                new_spec.extend([()] * len(out))
            else:
                new_spec.extend(_split_partitions(names, out, sizes))
        else:
            new_spec.append(names)
    return tuple(new_spec)


def _merge_spec(spec: Spec, new_shape: tuple, merge: list, sizes: AxisSizes) -> Spec | None:
    new_spec: list[tuple[str, ...]] = []
    it = iter(spec)
    for size, group in zip(new_shape, merge):
        if not isinstance(group, list):
            new_spec.append(next(it))
            continue
        tup = [next(it) for _ in group]
        if all(not t for t in tup):
            new_spec.append(())
            continue
        flat = list(tup)
        while flat and not flat[-1]:
            flat.pop()
        if any(not t for t in flat):
            return None
        names = tuple(n for t in flat for n in t)
        new_spec.extend(_split_partitions(names, [size], sizes))
    return tuple(new_spec)


def _split_partitions(names: Sequence[str], out: Sequence[int], sizes: AxisSizes) -> list:
    it = iter(names)
    parts = []
    for o in out:
        dim = []
        while o > 1:
            n = next(it, None)
            if n is None:
                break
            o, rem = divmod(o, sizes[n])
            if rem:
                raise _Refused
            dim.append(n)
        parts.append(tuple(dim))
    if next(it, None) is not None:
        raise _Refused
    return parts


def _split_on_one_axis(op_shape: list, new_sizes: list) -> tuple[bool, list]:
    """JAX's ``_split_on_one_axis``: whether ``new_sizes`` splits exactly one
    dim of ``op_shape`` (and how), raising ``_Refused`` where it splits more."""
    if len(new_sizes) <= len(op_shape):
        return False, []
    orig = op_shape
    num_1s = 0
    while op_shape and new_sizes and op_shape[-1] == 1 and new_sizes[-1] == 1:
        num_1s += 1
        op_shape, new_sizes = op_shape[:-1], new_sizes[:-1]
    i = j = count = 0
    out: list = []
    while j < len(new_sizes):
        if i >= len(op_shape):
            raise _Refused
        if op_shape[i] == new_sizes[j]:
            out.append(op_shape[i])
        else:
            count += 1
            if count > 1:
                raise _Refused
            temp = [new_sizes[j]]
            next_j, next_i = j + 1, i + 1
            while math.prod(temp) != op_shape[i] or (
                next_j < len(new_sizes) and new_sizes[next_j] == 1
            ):
                if math.prod(temp) > op_shape[i]:
                    return False, []
                if (math.prod(temp) == op_shape[i] and next_i < len(op_shape)
                        and new_sizes[next_j] == op_shape[next_i]):
                    break
                j += 1
                if j >= len(new_sizes):
                    return False, []
                temp.append(new_sizes[j])
                next_j += 1
            out.append(temp)
        i += 1
        j += 1
    out.extend([1] * num_1s)
    if len(orig) != len(out):
        raise _Refused
    return True, out
