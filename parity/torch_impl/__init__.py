"""parity's DTensor backend: the SPEC's backend functions on
``torch.distributed.tensor``.

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
"""

from parity.torch_impl.collectives import all_gather, all_reduce, reduce_scatter
from parity.torch_impl.distribute import (
    all_gather_variable,
    describe,
    distribute_data_input,
    distribute_tensor,
    distribute_variable,
    local_block,
    to_numpy,
)
from parity.torch_impl.keras_distribution_lib import (
    _to_backend_device,
    _to_backend_layout,
    _to_backend_mesh,
)
from parity.torch_impl.keras_install import install_keras
from parity.torch_impl.placements import to_placements, to_spec
from parity.torch_impl.runtime import (
    get_device_count,
    initialize,
    list_devices,
    num_processes,
    process_id,
    simulate,
    to_parity_mesh,
    to_torch_mesh,
)
from parity.torch_impl.semantics import jax_semantics

__all__ = [
    "_to_backend_device",
    "_to_backend_layout",
    "_to_backend_mesh",
    "all_gather",
    "all_gather_variable",
    "all_reduce",
    "describe",
    "distribute_data_input",
    "distribute_tensor",
    "distribute_variable",
    "get_device_count",
    "initialize",
    "install_keras",
    "jax_semantics",
    "list_devices",
    "local_block",
    "num_processes",
    "process_id",
    "reduce_scatter",
    "simulate",
    "to_numpy",
    "to_parity_mesh",
    "to_placements",
    "to_spec",
    "to_torch_mesh",
]
