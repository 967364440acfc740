"""JAX's explicit-sharding model on DTensor.

* ``api``: ``set_mesh``, ``device_put``, ``typeof``, ``reshard``,
  ``with_sharding_constraint``; ``axis_scope``: ``auto_axes``,
  ``explicit_axes``;
* ``check``: under ``jax_semantics()``, ops whose result sharding JAX's
  explicit mode refuses raise ``parity.ShardingTypeError`` on Explicit axes;
* ``out_sharding``: ``matmul``, ``dot``, ``einsum`` with JAX's
  ``out_sharding=`` keyword;
* ``shard_map`` and ``lax`` (the collectives of its body), over ``manual``
  (JAX's varying-axes types and ``pvary``).
"""

from parity.torch_impl.explicit import lax
from parity.torch_impl.explicit.api import (
    device_put,
    reshard,
    set_mesh,
    typeof,
    with_sharding_constraint,
)
from parity.torch_impl.explicit.axis_scope import auto_axes, explicit_axes
from parity.torch_impl.explicit.out_sharding import dot, einsum, matmul
from parity.torch_impl.explicit.shard_map import shard_map

__all__ = ["auto_axes", "device_put", "dot", "einsum", "explicit_axes", "lax", "matmul", "reshard",
           "set_mesh", "shard_map", "typeof", "with_sharding_constraint"]
