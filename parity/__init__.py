"""parity: JAX's sharding semantics for PyTorch DTensor.

``import parity`` loads neither torch nor jax; ``parity.backend("jax")`` and
``parity.backend("torch")`` load the reference and the DTensor backend.
"""

from parity.array_type import ArrayType
from parity.axis_types import AxisType
from parity.backends import active_backend, active_backend_name, backend, use_backend
from parity.errors import (
    IndivisibleError,
    LayoutError,
    MeshMismatchError,
    ParityError,
    ShardingError,
    ShardingTypeError,
    UnsupportedOpError,
)
from parity.layout import TensorLayout
from parity.layout_map import LayoutMap
from parity.mesh import DeviceMesh, make_mesh
from parity.partition_spec import P, PartitionSpec
from parity.placement import Placement

__version__ = "0.1.0"

__all__ = [
    "ArrayType",
    "AxisType",
    "DeviceMesh",
    "IndivisibleError",
    "LayoutError",
    "LayoutMap",
    "MeshMismatchError",
    "P",
    "ParityError",
    "PartitionSpec",
    "Placement",
    "ShardingError",
    "ShardingTypeError",
    "TensorLayout",
    "UnsupportedOpError",
    "active_backend",
    "active_backend_name",
    "backend",
    "make_mesh",
    "use_backend",
]
