"""parity's DTensor backend: the SPEC's backend functions on
``torch.distributed.tensor``, laid out as ``parity.jax_ref`` is.

```python
import numpy as np, parity
from parity import torch_impl

with torch_impl.simulate(8):
    mesh = parity.DeviceMesh((2, 4), ("data", "model"))
    x = torch_impl.distribute_tensor(np.arange(32.0).reshape(8, 4),
                                     parity.TensorLayout(("data", "model"), mesh))
    torch_impl.describe(x)            # same Placement as parity.jax_ref gives
    torch_impl.all_reduce(x, "sum", axis_name="model")
```

Folders, each on the ones after it: ``keras`` (the Keras backend shim),
``semantics`` (``jax_semantics``), ``arrays`` (distribute, to_numpy,
describe), ``collectives`` (all_reduce, all_gather, reduce_scatter, their
traced twins, donation), ``layouts`` (meshes, specs <-> placements),
``runtime`` (devices, state, watchdog, torch_compat).
"""

from parity.backends import BACKEND_FUNCTIONS, EXPLICIT_FUNCTIONS
from parity.torch_impl.runtime.devices import get_device_count, initialize, list_devices
from parity.torch_impl.runtime.devices import num_processes, process_id, simulate, torch_device
from parity.torch_impl.runtime.state import device_type
from parity.torch_impl.layouts.meshes import mesh_axis_names, to_parity_mesh, to_torch_mesh
from parity.torch_impl.layouts.specs import to_placements, to_spec
from parity.torch_impl.collectives.eager import all_gather, all_reduce, reduce_scatter
from parity.torch_impl.collectives.gather import all_gather_variable
from parity.torch_impl.collectives import traced as _traced  # noqa: F401 - registers their dynamo twins
from parity.torch_impl.arrays.describe import describe
from parity.torch_impl.arrays.distribute import distribute_data_input
from parity.torch_impl.arrays.distribute import distribute_tensor, distribute_variable
from parity.torch_impl.arrays.distribute import local_block, to_numpy
from parity.torch_impl.semantics import jax_semantics
from parity.torch_impl.explicit import auto_axes, explicit_axes
from parity.torch_impl.explicit import device_put, lax, reshard, set_mesh, shard_map, typeof
from parity.torch_impl.explicit import with_sharding_constraint
from parity.torch_impl.explicit import dot, einsum, matmul
from parity.torch_impl.keras.distribution_lib import _to_backend_device, _to_backend_layout
from parity.torch_impl.keras.distribution_lib import _to_backend_mesh
from parity.torch_impl.keras.install import install_keras, keras_install_scope, uninstall_keras

__all__ = sorted({*BACKEND_FUNCTIONS, *EXPLICIT_FUNCTIONS, "device_type", "install_keras", "jax_semantics",
                  "keras_install_scope", "uninstall_keras", "mesh_axis_names", "to_placements",
                  "to_spec", "to_torch_mesh",
                  "torch_device"})
