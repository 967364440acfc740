"""Which devices JAX sees: simulated CPU devices, device names, processes.

* ``simulate(n)`` sets ``jax_num_cpu_devices`` before JAX starts its backend
  (the first ``jax.devices()``, ``device_put`` or computation); JAX reads it
  once, so a later call with another n cannot take effect.
* Devices are named ``f"{platform}:{id}"`` (``"cpu:0"``, ``"gpu:3"``), as
  Keras's JAX backend names them.
* ``initialize`` starts ``jax.distributed`` exactly as Keras's JAX
  ``distribution_lib.initialize`` does (without Keras's RNG seeding: parity
  keeps no global RNG).
"""

from __future__ import annotations

import os
from typing import Any

import jax

from parity.arg_checks import check_device_type
from parity.errors import LayoutError, ParityError

# After simulate(), list_devices() without a type means the simulated CPU
# devices even where JAX's default platform is a GPU.
_default_device_type: str | None = None


def backend_started() -> bool | None:
    """Whether JAX has started its backend; ``None`` if this JAX cannot say."""
    try:
        from jax._src import xla_bridge
    except ImportError:
        return None
    probe = getattr(xla_bridge, "backends_are_initialized", None)
    return bool(probe()) if probe is not None else None


def _cpu_device_count() -> int:
    return len(jax.local_devices(backend="cpu"))


def simulate(n: int = 8) -> None:
    """Make JAX see ``n`` CPU devices in this process.

    Must run before JAX starts its backend. Once it has started, a call with
    the device count JAX already has is a no-op (so several test modules may
    each call ``simulate(8)``); any other n raises ``ParityError``, as does
    an n that is not a positive int.
    """
    global _default_device_type
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ParityError(f"simulate(n) needs a positive int; got n={n!r}.")
    started = backend_started()
    if not started:
        try:
            jax.config.update("jax_num_cpu_devices", n)
        except RuntimeError:  # this JAX could not tell us it had started
            started = True
    if started and _cpu_device_count() != n:
        raise ParityError(
            f"simulate({n}) came too late: JAX has already started its backend "
            f"with {_cpu_device_count()} CPU devices, and the count is fixed from "
            f"then on. Fix: call parity.jax_ref.simulate({n}) right after import, "
            "before jax.devices(), device_put or any computation (or start "
            f"Python with XLA_FLAGS=--xla_force_host_platform_device_count={n})."
        )
    _default_device_type = "cpu"


def _jax_devices(device_type: str | None, what: str) -> list[Any]:
    kind = check_device_type(device_type, what) or _default_device_type
    try:
        return jax.devices(kind)
    except RuntimeError as err:
        raise ParityError(f"No JAX devices of type {device_type!r}: {err}") from None


def list_devices(device_type: str | None = None) -> list[str]:
    """All devices of the job (every process's), as ``["cpu:0", ...]``.

    ``device_type`` ("cpu", "gpu", "tpu") picks a platform; without it, the
    simulated CPU devices after ``simulate``, else JAX's default platform.
    Starts JAX's backend. Raises ``ParityError`` for a platform JAX lacks
    and for a ``device_type`` that is not a string.
    """
    return [device_name(d) for d in _jax_devices(device_type, "list_devices")]


def get_device_count(device_type: str | None = None) -> int:
    """``len(list_devices(device_type))``; raises like ``list_devices``."""
    return len(_jax_devices(device_type, "get_device_count"))


def device_name(device: Any) -> str:
    """``"cpu:3"`` for JAX's CPU device 3."""
    return f"{device.platform}:{device.id}"


def to_jax_device(name: Any) -> Any:
    """The ``jax.Device`` named ``name`` (``"cpu:3"``, ``"gpu"`` = ``"gpu:0"``);
    a ``jax.Device`` is returned as is.

    Raises ``LayoutError`` when JAX has no such device.
    """
    if isinstance(name, jax.Device):
        return name
    text = str(name)
    kind, _, index = text.partition(":")
    try:
        candidates = jax.devices(kind.lower())
        wanted = int(index or 0)
    except (RuntimeError, ValueError):
        candidates, wanted = [], -1
    for device in candidates:
        if device.id == wanted:
            return device
    raise LayoutError(
        f"Device {text!r} not found; JAX has {[device_name(d) for d in jax.devices()]}. "
        "Fix: build the DeviceMesh from parity.jax_ref.list_devices(), or "
        "simulate more devices.",
        what="device", value=text,
    )


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


def initialize(
    job_addresses: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
) -> None:
    """Start multi-process JAX (``jax.distributed.initialize``), as Keras does.

    Missing arguments come from ``KERAS_DISTRIBUTION_JOB_ADDRESSES``,
    ``KERAS_DISTRIBUTION_NUM_PROCESSES`` and ``KERAS_DISTRIBUTION_PROCESS_ID``;
    left ``None``, JAX detects them (cluster environments). ``job_addresses``
    is ``"host:port"`` of the coordinator or a comma-separated list whose
    first entry is the coordinator. Calling it again with the same arguments
    is a no-op.

    Raises ``ParityError`` when the address list and ``num_processes``
    disagree, when JAX's backend has already started, or when
    ``jax.distributed`` was started with other arguments.
    """
    if job_addresses is None:
        job_addresses = os.environ.get("KERAS_DISTRIBUTION_JOB_ADDRESSES") or None
    if num_processes is None:
        num_processes = _env_int("KERAS_DISTRIBUTION_NUM_PROCESSES")
    if process_id is None:
        process_id = _env_int("KERAS_DISTRIBUTION_PROCESS_ID")
    coordinator = job_addresses
    if job_addresses and "," in job_addresses:
        addresses = [a.strip() for a in job_addresses.split(",")]
        if num_processes is not None and num_processes != len(addresses):
            raise ParityError(
                f"job_addresses {addresses} has {len(addresses)} jobs, but "
                f"num_processes is {num_processes}."
            )
        coordinator = addresses[0]
    state = _distributed_state()
    if state is not None and getattr(state, "client", None) is not None:
        if (num_processes in (None, state.num_processes)) and (
            process_id in (None, state.process_id)
        ):
            return
        raise ParityError(
            "jax.distributed is already initialized with num_processes="
            f"{state.num_processes}, process_id={state.process_id}; got "
            f"num_processes={num_processes}, process_id={process_id}."
        )
    if backend_started():
        raise ParityError(
            "initialize() must run before JAX starts its backend (before "
            "jax.devices(), list_devices(), device_put or any computation)."
        )
    try:
        jax.distributed.initialize(
            coordinator_address=coordinator,
            num_processes=num_processes,
            process_id=process_id,
        )
    except (RuntimeError, ValueError, TypeError) as err:
        raise ParityError(f"jax.distributed.initialize failed: {err}") from err


def _distributed_state() -> Any:
    try:
        from jax._src import distributed
    except ImportError:
        return None
    return getattr(distributed, "global_state", None)


def num_processes() -> int:
    """``jax.process_count()`` (1 unless ``initialize`` ran); starts the backend."""
    return jax.process_count()


def process_id() -> int:
    """``jax.process_index()`` (0 unless ``initialize`` ran); starts the backend."""
    return jax.process_index()
