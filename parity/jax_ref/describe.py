"""``describe``: the ``Placement`` of a distributed ``jax.Array``, read from
JAX itself (``sharding.devices_indices_map``), never from a formula.

Arrays that are not distributed (host data, single-device arrays) raise
``ParityError`` rather than pass as a 1-device mesh, so a missing
``distribute_tensor`` never hides behind a trivially correct placement.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from jax.sharding import NamedSharding

from parity.errors import ParityError
from parity.jax_ref.distribute import require_distributed
from parity.jax_ref.meshes import spec_of
from parity.placement import Placement


def describe(x: Any) -> Placement:
    """Shape, dtype, mesh, spec and per-device blocks of ``x``.

    Works for ``NamedSharding`` on explicit and auto meshes. Device index
    ``i`` is ``x.sharding.mesh.devices.flat[i]``; ``pending`` lists the
    spec's ``unreduced`` axes (empty for every array parity returns).
    Raises ``ParityError`` when ``x`` is not a distributed ``jax.Array``.
    """
    x = require_distributed(x, "describe")
    return describe_sharding(x.sharding, tuple(x.shape), x.dtype)


def describe_sharding(sharding: NamedSharding, shape: tuple[int, ...], dtype: Any) -> Placement:
    """The ``Placement`` an array of ``shape`` and ``dtype`` has under
    ``sharding`` (a ``NamedSharding`` on a concrete mesh), read from JAX's
    ``devices_indices_map``: what ``describe`` gives for such an array, and
    how a traced or compiled output's sharding is read without the array.

    Raises ``ParityError`` for a sharding that is not a ``NamedSharding`` on
    a concrete mesh, and for an unconstrained spec entry.
    """
    if not isinstance(sharding, NamedSharding) or not hasattr(sharding.mesh, "devices"):
        raise ParityError(
            f"describe_sharding needs a NamedSharding on a concrete mesh; got {sharding!r}."
        )
    mesh = sharding.mesh
    shape = tuple(int(s) for s in shape)
    position = {device: i for i, device in enumerate(mesh.devices.flat)}
    shards = {
        position[device]: tuple(
            sl.indices(size)[:2] for sl, size in zip(index, shape)
        )
        for device, index in sharding.devices_indices_map(shape).items()
    }
    return Placement(
        shape=shape,
        dtype=np.dtype(dtype).name,
        mesh_shape=tuple(mesh.devices.shape),
        axis_names=tuple(mesh.axis_names),
        spec=spec_of(sharding.spec, len(shape)),
        shards=shards,
        pending=tuple(sorted(getattr(sharding.spec, "unreduced", ()) or ())),
    )
