"""parity's reference backend, on ``jax.sharding``: its behaviour *is* the
semantics that ``parity.torch_impl`` must match.

```python
import numpy as np, parity
from parity import jax_ref

jax_ref.simulate(8)                      # before JAX starts its backend
mesh = parity.DeviceMesh((2, 4), ("data", "model"), jax_ref.list_devices())
x = jax_ref.distribute_tensor(np.arange(32.0).reshape(8, 4),
                              parity.TensorLayout(("data", "model"), mesh))
jax_ref.describe(x)                      # a parity.Placement
jax_ref.all_reduce(x, "sum", axis_name="model")
```

Meshes are built with explicit axis types by default (sharding in types,
the normative rule); pass ``axis_types="auto"`` for the compiler's choice.
JAX runs with 64-bit types disabled unless ``jax_enable_x64`` is set:
int64 and float64 inputs become int32 and float32 (``describe`` reports
the dtype JAX actually holds).
"""

from parity.backends import BACKEND_FUNCTIONS, EXPLICIT_FUNCTIONS
from parity.jax_ref.collectives import all_gather, all_reduce, reduce_scatter
from parity.jax_ref.describe import describe, describe_sharding
from parity.jax_ref.devices import get_device_count, initialize, list_devices, num_processes
from parity.jax_ref.devices import process_id, simulate, to_jax_device
from parity.jax_ref.distribute import all_gather_variable, distribute_data_input
from parity.jax_ref.distribute import distribute_tensor, distribute_variable, local_block, to_numpy
from parity.jax_ref.meshes import _to_backend_layout, _to_backend_mesh, spec_of, to_jax_mesh
from parity.jax_ref.meshes import to_named_sharding, to_parity_mesh, to_partition_spec

from parity.jax_ref.explicit import device_put, reshard, set_mesh, shard_map, typeof
from parity.jax_ref.explicit import auto_axes, explicit_axes, with_sharding_constraint
from parity.jax_ref.explicit import dot, einsum, matmul
from parity.jax_ref import lax

_to_backend_device = to_jax_device

__all__ = sorted({*BACKEND_FUNCTIONS, *EXPLICIT_FUNCTIONS, "describe_sharding", "spec_of", "to_jax_device",
                  "to_jax_mesh", "to_named_sharding", "to_partition_spec"})
