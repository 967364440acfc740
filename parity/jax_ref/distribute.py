"""Putting arrays on a mesh and reading them back: ``distribute_*``,
``all_gather_variable``, ``to_numpy`` and ``local_block``.

Everything goes through ``jax.device_put`` (or, for data input,
``jax.make_array_from_process_local_data``) with the layout's
``NamedSharding``; JAX itself slices host data and reshards device arrays.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from parity import ambient
from parity.arg_checks import check_device_index, numeric_host
from parity.errors import DonatedArrayError, ParityError
from parity.jax_ref.meshes import require_layout, to_named_sharding


def _as_value(x: Any, what: str, arg: str) -> Any:
    # A Python list would be a pytree of scalars to device_put; make it one array.
    return x if isinstance(x, jax.Array) else numeric_host(x, what, arg)


def distribute_tensor(x: Any, layout: Any, *, axis_types: str = "explicit") -> jax.Array:
    """``x`` (host data or a ``jax.Array``, distributed or not) laid out as
    ``layout`` (a ``TensorLayout``, or a ``parity.P`` on the ambient mesh);
    a distributed array is resharded. Works under ``jax.jit`` too.

    Raises ``LayoutError`` (not a bound ``TensorLayout``, a ``P`` with no
    ambient mesh, rank mismatch), ``ShardingError`` (a dim that does not
    divide by its shard count).
    """
    value = _as_value(x, "distribute_tensor", "x")
    layout = require_layout(ambient.resolve(layout, np.ndim(value), "distribute_tensor"))
    layout.check_shape(value.shape)
    return jax.device_put(value, to_named_sharding(layout, axis_types))


def distribute_variable(value: Any, layout: Any, *, axis_types: str = "explicit") -> jax.Array:
    """``distribute_tensor`` (JAX arrays are values; each device stores only
    its block); ``layout`` may be a ``parity.P`` on the ambient mesh. Raises
    like ``distribute_tensor``."""
    return distribute_tensor(value, layout, axis_types=axis_types)


def distribute_data_input(
    per_process_batch: Any,
    layout: Any,
    batch_dim_name: str | None = None,
    *,
    axis_types: str = "explicit",
) -> jax.Array:
    """The global batch from each process's local batch:
    ``jax.make_array_from_process_local_data(sharding, per_process_batch)``.

    In one process the local batch is the global batch (same as
    ``distribute_tensor``). ``batch_dim_name`` is Keras's argument; if given
    it must name a mesh axis. Raises ``LayoutError`` (no mesh, rank
    mismatch, unknown ``batch_dim_name``) and ``ShardingError`` (one
    process: an indivisible dim).
    """
    layout = require_layout(layout)
    if batch_dim_name is not None:
        layout.device_mesh.axis_index(batch_dim_name)
    value = _as_value(per_process_batch, "distribute_data_input", "per_process_batch")
    if jax.process_count() == 1 or len(value.shape) != layout.rank:
        layout.check_shape(value.shape)
    return jax.make_array_from_process_local_data(
        to_named_sharding(layout, axis_types), value
    )


def require_distributed(x: Any, what: str) -> jax.Array:
    """``x`` if it is a concrete ``jax.Array`` with a ``NamedSharding``.

    Raises ``ParityError`` otherwise: host data, a single-device array and
    a traced value are not distributed arrays; ``DonatedArrayError`` for a
    donated (deleted) one.
    """
    if isinstance(x, jax.core.Tracer):
        raise ParityError(f"{what} needs a concrete array, not a traced value under jit.")
    if isinstance(x, jax.Array) and x.is_deleted():
        raise DonatedArrayError(
            f"{what} got an array that was donated (donate=True) or deleted: its buffer "
            "is gone. Fix: use the value the donating call returned.", what=what)
    if not isinstance(x, jax.Array) or not isinstance(x.sharding, NamedSharding):
        kind = type(x).__name__
        if isinstance(x, jax.Array):
            kind = f"a jax.Array with {type(x.sharding).__name__}"
        raise ParityError(
            f"{what} needs a distributed jax.Array (with a NamedSharding); got "
            f"{kind}. Fix: distribute_tensor(x, layout) first."
        )
    return x


def all_gather_variable(x: Any) -> jax.Array:
    """``x`` fully replicated on its own mesh.

    Raises ``ParityError`` when ``x`` is not distributed.
    """
    x = require_distributed(x, "all_gather_variable")
    return jax.device_put(x, NamedSharding(x.sharding.mesh, PartitionSpec()))


def to_numpy(x: Any) -> np.ndarray:
    """The whole global array as numpy, gathered from every process if needed.

    Host data is converted as it is. Raises ``DonatedArrayError`` for a
    donated (deleted) array and ``ParityError`` for a value that is not
    numeric array data (``None``, a string, an object array).
    """
    if isinstance(x, jax.Array) and x.is_deleted():
        require_distributed(x, "to_numpy")  # raises DonatedArrayError
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    if isinstance(x, jax.Array):
        return np.asarray(x)
    return numeric_host(x, "to_numpy", "x")


def local_block(x: Any, device_index: int) -> np.ndarray:
    """The block device ``device_index`` (``mesh.devices.flat[i]``) holds.

    Raises ``ParityError`` when ``x`` is not distributed, the index is not
    an int in range, or another process holds that device.
    """
    x = require_distributed(x, "local_block")
    devices = list(x.sharding.mesh.devices.flat)
    device_index = check_device_index(device_index, len(devices), "local_block")
    for shard in x.addressable_shards:
        if shard.device == devices[device_index]:
            return np.asarray(shard.data)
    raise ParityError(
        f"Device {device_index} ({devices[device_index]}) is held by another "
        f"process (this is process {jax.process_index()})."
    )
