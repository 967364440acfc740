"""Which backend module serves a name, and which one is active.

``backend("jax")`` imports ``parity.jax_ref``, ``backend("torch")``
``parity.torch_impl``; neither is imported before it is asked for, so
``import parity`` never loads torch or jax.

The *active* backend is the one whose ``list_devices()`` fills a
``DeviceMesh`` built without devices. It is, in order: the innermost
``use_backend(name)`` (``torch_impl.simulate`` enters one), else the
``PARITY_BACKEND`` environment variable, else the only backend imported so
far. With both imported and none chosen, that is ambiguous and raises.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import os
import sys
from collections.abc import Iterator
from types import ModuleType

from parity.errors import ParityError

BACKEND_MODULES = {"jax": "parity.jax_ref", "torch": "parity.torch_impl"}

# The SPEC's backend functions: every backend module exports each of them,
# with the same signature and meaning (tests/test_backend_parity.py checks).
BACKEND_FUNCTIONS = (
    "_to_backend_device", "_to_backend_layout", "_to_backend_mesh",
    "all_gather", "all_gather_variable", "all_reduce", "describe",
    "distribute_data_input", "distribute_tensor", "distribute_variable",
    "get_device_count", "initialize", "list_devices", "local_block",
    "num_processes", "process_id", "reduce_scatter", "simulate",
    "to_numpy", "to_parity_mesh",
)

# JAX's explicit-sharding API, on both backends with one meaning.
EXPLICIT_FUNCTIONS = (
    "auto_axes", "device_put", "dot", "einsum", "explicit_axes", "lax", "matmul", "reshard",
    "set_mesh", "shard_map", "typeof", "with_sharding_constraint",
)

_active: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "parity_active_backend", default=None
)


def _check_name(name: str) -> str:
    if name not in BACKEND_MODULES:
        raise ParityError(
            f"Unknown backend {name!r}: choose one of {sorted(BACKEND_MODULES)}."
        )
    return name


def backend(name: str) -> ModuleType:
    """The backend module for ``name`` ("jax" or "torch").

    Raises ``ParityError`` for another name.
    """
    return importlib.import_module(BACKEND_MODULES[_check_name(name)])


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[ModuleType]:
    """Make ``name`` the active backend inside the ``with`` block."""
    token = _active.set(_check_name(name))
    try:
        yield backend(name)
    finally:
        _active.reset(token)


def active_backend_name() -> str:
    """The name of the active backend (see the module docstring).

    Raises ``ParityError`` when none can be told apart.
    """
    chosen = _active.get() or os.environ.get("PARITY_BACKEND")
    if chosen:
        return _check_name(chosen)
    loaded = [n for n, mod in BACKEND_MODULES.items() if mod in sys.modules]
    if len(loaded) == 1:
        return loaded[0]
    raise ParityError(
        "No active parity backend: pass devices= explicitly, set "
        "PARITY_BACKEND=jax|torch, or build the mesh inside "
        "parity.use_backend(name) or torch_impl.simulate(n). "
        f"Backends imported: {loaded or 'none'}."
    )


def active_backend() -> ModuleType:
    """The active backend module (see ``active_backend_name``)."""
    return backend(active_backend_name())
