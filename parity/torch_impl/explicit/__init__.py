"""JAX's explicit-sharding model on DTensor (issue 26).

* ``api``: ``set_mesh``, ``device_put``, ``typeof``, ``reshard``,
  ``with_sharding_constraint``;
* ``check``: under ``jax_semantics()``, ops whose result sharding JAX's
  explicit mode refuses raise ``parity.ShardingTypeError`` on Explicit axes;
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
from parity.torch_impl.explicit.shard_map import shard_map

__all__ = ["device_put", "lax", "reshard", "set_mesh", "shard_map", "typeof",
           "with_sharding_constraint"]
