"""parity: JAX's sharding semantics for PyTorch DTensor.

``import parity`` loads neither torch nor jax; ``parity.backend("jax")`` and
``parity.backend("torch")`` load the reference and the DTensor backend.
"""

from parity.backends import active_backend, active_backend_name, backend, use_backend
from parity.errors import (
    IndivisibleError,
    LayoutError,
    MeshMismatchError,
    ParityError,
    ShardingError,
    UnsupportedOpError,
)
from parity.layout import TensorLayout
from parity.layout_map import LayoutMap
from parity.mesh import DeviceMesh
from parity.placement import Placement

__version__ = "0.1.0"

__all__ = [
    "DeviceMesh",
    "IndivisibleError",
    "LayoutError",
    "LayoutMap",
    "MeshMismatchError",
    "ParityError",
    "Placement",
    "ShardingError",
    "TensorLayout",
    "UnsupportedOpError",
    "active_backend",
    "active_backend_name",
    "backend",
    "use_backend",
]
