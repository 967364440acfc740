"""The torch backend's ``distribution_lib`` for Keras 3 (hooks H1/H2).

Keras on torch ships no distribution backend: ``keras.src.backend.distribution_lib``
is ``None``. ``install_keras()`` points it (and the copy bound in
``keras.src.distribution.distribution_lib``) at this module, which has the
names the JAX backend's module has, with the JAX signatures:
``list_devices``, ``get_device_count``, ``initialize``, ``num_processes``,
``process_id``, ``distribute_tensor``, ``distribute_variable``,
``distribute_data_input``, ``initialize_rng``, ``_to_backend_device``,
``_to_backend_mesh``, ``_to_backend_layout``.

Every function accepts a Keras ``TensorLayout``, a ``parity.TensorLayout`` or
a ``TorchSharding`` (what ``_to_backend_layout`` returns: the torch analogue of
``jax.sharding.NamedSharding``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from torch.distributed.device_mesh import DeviceMesh as TorchMesh
from torch.distributed.tensor import DTensor

import parity
from parity.errors import LayoutError
from parity.torch_impl.arrays import distribute as _dist
from parity.torch_impl.runtime.rank_results import first_rank_value
from parity.torch_impl.runtime import devices
from parity.torch_impl.layouts import meshes
from parity.torch_impl.layouts.specs import placements_for
from parity.torch_impl.layouts.tensors import require_layout

__all__ = [
    "TorchSharding",
    "distribute_data_input",
    "distribute_tensor",
    "distribute_variable",
    "get_device_count",
    "initialize",
    "initialize_rng",
    "list_devices",
    "num_processes",
    "process_id",
]


@dataclasses.dataclass(frozen=True)
class TorchSharding:
    """A layout bound to a torch mesh: ``mesh`` (torch ``DeviceMesh``),
    ``placements`` (DTensor placements, one per mesh dim), ``spec`` (JAX-style
    ``PartitionSpec`` tuples) and ``layout`` (the ``parity.TensorLayout``)."""

    mesh: TorchMesh
    placements: tuple
    spec: tuple
    layout: parity.TensorLayout = dataclasses.field(compare=False)


def list_devices(device_type=None):
    return devices.list_devices(device_type)


def get_device_count(device_type=None):
    return devices.get_device_count(device_type)


def num_processes():
    return devices.num_processes()


def process_id():
    return devices.process_id()


def initialize(job_addresses=None, num_processes=None, process_id=None):
    """JAX's contract (``keras/src/backend/jax/distribution_lib.py``): a
    comma-separated ``job_addresses`` must have ``num_processes`` entries;
    the first is the coordinator. Unset values come from torchrun's
    environment. Then the Keras seed is made equal on every process."""
    if job_addresses and "," in job_addresses:
        addresses = job_addresses.split(",")
        if num_processes is not None and num_processes != len(addresses):
            raise ValueError(
                f"The provided job_addresses {addresses} has {len(addresses)} "
                f"jobs, but num_processes is {num_processes}"
            )
    devices.initialize(job_addresses, num_processes, process_id)
    initialize_rng()


def initialize_rng():
    """Give every process the same global Keras seed (rank 0's) when the user
    set none, as the JAX backend does, so initializers draw equal values."""
    from keras.src.random import seed_generator
    from keras.src.utils import rng_utils

    if rng_utils.get_random_seed() is not None or devices.num_processes() == 1:
        return
    seed = torch.tensor([seed_generator.make_default_seed()], dtype=torch.int64)
    torch.distributed.broadcast(seed, src=0)
    rng_utils.set_random_seed(int(seed.item()))


def _to_backend_device(device_name):
    """``"cpu:3"`` -> ``torch.device("cpu")``; ``"gpu:3"`` -> the CUDA device
    that rank's blocks live on.

    Raises ``LayoutError`` (a ``ValueError``, "Device not found" as Keras
    says it) for an unknown device or a ``device_name`` that is not a string.
    """
    if isinstance(device_name, torch.device):
        return device_name
    if not isinstance(device_name, str):
        raise LayoutError(
            f"Device not found: device_name={device_name!r} is not a device name. "
            "Fix: pass a string such as 'cpu:0' or 'gpu:1' (list_devices() lists them).",
            what="device_name", value=device_name,
        )
    kind, _, index = device_name.partition(":")
    index = index or "0"
    if kind not in ("cpu", "gpu", "cuda") or not index.isdigit():
        raise LayoutError(f"Device not found: {device_name!r}. Fix: a name such as 'cpu:0' "
                          "or 'gpu:1' (list_devices() lists them).",
                          what="device_name", value=device_name)
    if kind == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise LayoutError(f"Device not found: {device_name!r} (no CUDA device is visible).",
                          what="device_name", value=device_name)
    return torch.device("cuda", int(index) % torch.cuda.device_count())


def _parity_mesh(keras_mesh) -> parity.DeviceMesh:
    if isinstance(keras_mesh, parity.DeviceMesh):
        return keras_mesh
    if any(not hasattr(keras_mesh, a) for a in ("shape", "axis_names", "devices")):
        raise LayoutError(
            f"device_mesh must be a keras.distribution.DeviceMesh or a parity.DeviceMesh; "
            f"got {keras_mesh!r}.",
            what="device_mesh", value=keras_mesh,
        )
    return parity.DeviceMesh(
        tuple(keras_mesh.shape), tuple(keras_mesh.axis_names), np.asarray(keras_mesh.devices)
    )


def _to_backend_mesh(device_mesh):
    """The torch ``DeviceMesh`` of a Keras ``DeviceMesh`` (needs ranks:
    ``simulate(n)`` or ``initialize()``). Raises ``LayoutError`` for anything
    that is not a Keras or parity ``DeviceMesh``."""
    return meshes.to_torch_mesh(_parity_mesh(device_mesh))


def _to_backend_layout(tensor_layout):
    """A ``TorchSharding`` for a Keras ``TensorLayout`` (or a parity one).

    Raises ``LayoutError`` (a ``ValueError``) for a layout without a mesh,
    and for anything that is not a layout.
    """
    if isinstance(tensor_layout, TorchSharding):
        return tensor_layout
    _require_layout_like(tensor_layout)
    if tensor_layout.device_mesh is None:
        raise LayoutError(
            f"Cannot create sharding when device mesh is not set for TensorLayout "
            f"{tensor_layout!r}. Fix: TensorLayout(axes, device_mesh).",
            what="device_mesh", value=None,
        )
    layout = _parity_layout(tensor_layout)
    torch_mesh = meshes.to_torch_mesh(layout.require_mesh())
    return TorchSharding(
        mesh=torch_mesh,
        placements=placements_for(layout.spec, torch_mesh),
        spec=layout.spec,
        layout=layout,
    )


def _require_layout_like(layout) -> None:
    if isinstance(layout, (TorchSharding, parity.TensorLayout)):
        return
    if not hasattr(layout, "axes") or not hasattr(layout, "device_mesh"):
        raise LayoutError(
            f"layout must be a keras.distribution.TensorLayout or a parity.TensorLayout; "
            f"got {layout!r}.",
            what="layout", value=layout,
        )


def _parity_layout(layout) -> parity.TensorLayout:
    if isinstance(layout, TorchSharding):
        return layout.layout
    if isinstance(layout, parity.TensorLayout):
        return require_layout(layout)
    _require_layout_like(layout)
    mesh = getattr(layout, "device_mesh", None)
    if mesh is None and getattr(layout, "axes", None) is not None:
        raise LayoutError(
            f"Cannot create sharding when device mesh is not set for TensorLayout "
            f"{layout!r}. Fix: TensorLayout(axes, device_mesh).",
            what="device_mesh", value=None,
        )
    # Kept on the Keras layout (for the axes and mesh it was made from):
    # inside a compiled step dynamo then reads an attribute instead of
    # tracing the mesh conversion (numpy device arrays break its graph).
    cached = getattr(layout, "_parity_layout", None)
    axes = tuple(layout.axes)
    if cached is not None and cached[0] == axes and cached[1] is mesh:
        return cached[2]
    converted = require_layout(parity.TensorLayout(axes, _parity_mesh(mesh)))
    layout._parity_layout = (axes, mesh, converted)
    return converted


def _passes_through(x) -> bool:
    """Values a layout cannot apply to: symbolic tensors, meta tensors (torch's
    ``compute_output_spec``), ``None``."""
    if x is None:
        return True
    from keras.src.backend.common.keras_tensor import KerasTensor
    from keras.src.backend.common.symbolic_scope import in_symbolic_scope

    if isinstance(x, KerasTensor) or in_symbolic_scope():
        return True
    if isinstance(x, torch.Tensor) and x.device.type == "meta":
        return True
    return False


def _same_layout(x: DTensor, layout: parity.TensorLayout) -> bool:
    torch_mesh = meshes.to_torch_mesh(layout.require_mesh())
    return x.device_mesh == torch_mesh and tuple(x.placements) == placements_for(layout.spec,
                                                                                 torch_mesh)


def _distribute_one(x, layout):
    if _passes_through(x):
        return x
    if isinstance(x, torch.nn.Parameter) and isinstance(x.data, DTensor):
        x = x.data
    if isinstance(x, DTensor) and _same_layout(x, layout):
        return x  # JAX: skip the relayout when it is unnecessary
    if not isinstance(x, DTensor):
        x = _host_value(x)
    return _dist.distribute_tensor(x, layout)


def _host_value(x):
    """A plain host value from a plain tensor, or from a ``LocalTensor``
    whose ranks hold equal values (values Keras builds inside ``simulate``)."""
    if getattr(x, "_local_tensors", None) is not None:
        return first_rank_value(x)
    if hasattr(x, "__array__") and not isinstance(x, (torch.Tensor, np.ndarray)):
        return np.asarray(x)
    return x


def distribute_tensor(tensor, layout):
    """``tensor`` (a structure of tensors) laid out as ``layout``.

    Symbolic and meta values pass through; a DTensor already in that layout is
    returned as is; other DTensors are resharded (differentiable), host values
    sliced per rank.
    """
    from keras.src import tree

    if tree.is_nested(tensor):
        if all(_passes_through(t) for t in tree.flatten(tensor)):
            return tensor
        target = _parity_layout(layout)
        return tree.map_structure(lambda t: _distribute_one(t, target), tensor)
    if _passes_through(tensor):
        if getattr(layout, "device_mesh", None) is not None:
            _parity_layout(layout)  # built symbolically: fills the cache a compiled step reads
        return tensor
    return _distribute_one(tensor, _parity_layout(layout))


def distribute_variable(value, layout):
    """A ``Parameter`` over a DTensor of ``layout`` (physically sharded)."""
    if isinstance(value, torch.nn.Parameter) and isinstance(value.data, DTensor):
        value = value.data
    if not isinstance(value, DTensor):
        value = _host_value(value)
    return _dist.distribute_variable(value, _parity_layout(layout))


def distribute_data_input(per_process_batch, layout, batch_dim_name=None):
    """The global batch from this process's batch
    (``jax.make_array_from_process_local_data``). With no layout (Keras's
    trainer passes ``None`` for absent data, e.g. a missing sample weight),
    the batch is returned as it is, as Keras's own backends do."""
    if layout is None:
        return per_process_batch
    if isinstance(per_process_batch, DTensor):
        return distribute_tensor(per_process_batch, layout)
    return _dist.distribute_data_input(
        _host_value(per_process_batch), _parity_layout(layout), batch_dim_name
    )


def to_numpy(x: Any) -> np.ndarray:
    """The global value of a DTensor (or Parameter over one) as numpy.

    Raises as ``parity.torch_impl.to_numpy`` does."""
    if isinstance(x, torch.nn.Parameter) and isinstance(x.data, DTensor):
        x = x.data
    return _dist.to_numpy(x)
