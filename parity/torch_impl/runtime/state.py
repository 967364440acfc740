"""Which mode the torch backend runs in, as one immutable snapshot.

* ``plain``: no process group; one device.
* ``simulated``: ``simulate(n)``, n ranks in this process.
* ``multiprocess``: one process per device (``initialize()``, or a process
  group the user started with ``torch.distributed`` directly).

Only ``simulate()`` and ``initialize()`` replace the snapshot
(``set_runtime``); every query reads it and never writes.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading

import torch
import torch.distributed as dist

from parity.torch_impl.runtime.torch_compat import clear_sharding_caches, default_group


@dataclasses.dataclass(frozen=True)
class Runtime:
    """One state of the backend; ``generation`` changes with the process
    group (caches of torch meshes key on it)."""

    mode: str = "plain"  # plain | simulated | multiprocess
    world_size: int = 1
    device_type: str = "cpu"  # torch device type: cpu | cuda
    generation: object = 0


lock = threading.RLock()
_generations = itertools.count(1)
_runtime = Runtime()
_user_runtime: tuple[object, Runtime] | None = None


def set_runtime(mode_name: str, world_size: int, device_type: str) -> Runtime:
    """Replace the snapshot (``simulate``/``initialize`` only); a new
    generation, and DTensor's caches that would hand back the old one's
    meshes emptied (``clear_sharding_caches``)."""
    global _runtime
    with lock:
        _runtime = Runtime(mode_name, world_size, device_type, next(_generations))
        clear_sharding_caches()
        return _runtime


def current() -> Runtime:
    """The backend's state now.

    A process group started by the user (not through ``initialize``) reads
    as multi-process mode; its generation is the group object itself, so a
    group destroyed and started again is a new generation. Nothing is stored.
    """
    state = _runtime
    if state.mode != "plain":
        return state
    world = default_group()
    if world is None:  # no process group
        return state
    derived = _user_runtime
    if derived is None or derived[0] is not world:
        derived = (world, Runtime("multiprocess", dist.get_world_size(),
                                  "cuda" if dist.get_backend() == "nccl" else "cpu",
                                  ("user", world)))
        clear_sharding_caches()  # a new group: see set_runtime
        globals()["_user_runtime"] = derived  # a cache of what the group says, not state
    return derived[1]


def mode() -> str:
    """``"plain"``, ``"simulated"`` or ``"multiprocess"``."""
    return current().mode


def generation() -> object:
    """A hashable that changes whenever the process group does."""
    return current().generation


def device_type() -> str:
    """The torch device type tensors are placed on: ``"cpu"`` or ``"cuda"``."""
    return current().device_type


def torch_device() -> torch.device:
    """The torch device of this process's local blocks."""
    state = current()
    if state.device_type == "cuda":
        index = 0 if state.mode == "simulated" else dist.get_rank() % max(
            torch.cuda.device_count(), 1)
        return torch.device("cuda", index)
    return torch.device("cpu")


def parity_device_kind(device_type: str) -> str:
    """parity's device kind for a torch device type (``cuda`` -> ``gpu``)."""
    return "gpu" if device_type == "cuda" else device_type
