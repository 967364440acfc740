"""Which mode the torch backend runs in, as one immutable snapshot.

* ``plain``: no process group; one device.
* ``simulated``: ``simulate(n)``, n ranks in this process.
* ``multiprocess``: one process per device (``initialize()``, or a process
  group the user started with ``torch.distributed`` directly).

Only ``simulate()`` and ``initialize()`` replace the snapshot
(``set_runtime``); every query reads it and never writes.

The caches of values tied to one process group -- torch meshes, process
groups, and what holds them (the collectives' plans, their specs) -- live in
their modules and register here (``per_generation``); all of them, and
DTensor's own sharding caches, are emptied together when the generation
changes, and nowhere else checks it. A cache that holds no mesh or group
(keyed and valued by placements, shapes, names) needs no registering.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Callable

import torch
import torch.distributed as dist

from parity.torch_impl.runtime.torch_compat import clear_sharding_caches, default_group


@dataclasses.dataclass(frozen=True)
class Runtime:
    """One state of the backend; ``generation`` changes with the process
    group (the per-generation caches are emptied when it does)."""

    mode: str = "plain"  # plain | simulated | multiprocess
    world_size: int = 1
    device_type: str = "cpu"  # torch device type: cpu | cuda
    generation: object = 0


lock = threading.RLock()
_generations = itertools.count(1)
_runtime = Runtime()
_user_runtime: tuple[object, Runtime] | None = None


# The ``clear`` of every cache of one generation's values (``per_generation``),
# DTensor's sharding caches first: their keys compare meshes by value, not by
# process group, and the output specs they hand back hold the mesh object of
# the first call (after a new process group, ``x.detach()`` or
# ``nn.Parameter(x)`` of a DTensor on the new mesh came back on the old, equal
# one; Megatron-LM#7029 and transformers#48383 met the same).
_clears: list[Callable[[], None]] = [clear_sharding_caches]
_cleared_for: list[object] = [None]  # the generation the registered caches hold


def per_generation(clear: Callable[[], None]) -> None:
    """Register ``clear``, which empties a cache of values tied to one
    runtime generation (a torch mesh, a process group, a value holding one):
    it is called whenever the generation changes, before the new one's first
    value is looked up (``current``)."""
    _clears.append(clear)


def _new_generation(generation: object) -> None:
    """Empty every registered cache, now holding ``generation``'s values.
    Under the lock that guards the caches' fills, except while dynamo
    traces (it cannot enter a lock; a trace runs on one thread)."""
    if torch.compiler.is_compiling():
        _clear_all(generation)
        return
    with lock:
        _clear_all(generation)


def _clear_all(generation: object) -> None:
    _cleared_for[0] = generation
    for clear in _clears:
        clear()


def set_runtime(mode_name: str, world_size: int, device_type: str) -> Runtime:
    """Replace the snapshot (``simulate``/``initialize`` only): a new
    generation, and every per-generation cache emptied."""
    global _runtime
    with lock:
        _runtime = Runtime(mode_name, world_size, device_type, next(_generations))
        _new_generation(_runtime.generation)
        return _runtime


def current() -> Runtime:
    """The backend's state now; the per-generation caches emptied first
    when its generation is not the one they hold (``per_generation``).

    A process group started by the user (not through ``initialize``) reads
    as multi-process mode; its generation is the group object itself, so a
    group destroyed and started again is a new generation (what the group
    says is cached, not stored as state).
    """
    state = _runtime
    if state.mode == "plain":
        world = default_group()
        if world is not None:  # a process group the user started
            derived = _user_runtime
            if derived is None or derived[0] is not world:
                derived = (world, Runtime("multiprocess", dist.get_world_size(),
                                          "cuda" if dist.get_backend() == "nccl" else "cpu",
                                          ("user", world)))
                globals()["_user_runtime"] = derived  # a cache of what the group says, not state
            state = derived[1]
    if state.generation is not _cleared_for[0]:
        _new_generation(state.generation)
    return state


def mode() -> str:
    """``"plain"``, ``"simulated"`` or ``"multiprocess"``."""
    return current().mode


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
