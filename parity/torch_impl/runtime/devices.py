"""Where the torch backend's ranks come from, and which devices they are.

* ``simulate(n)``: n ranks in this process, through ``LocalTensorMode``
  (``simulator.SimulatedRanksMode``) over a ``fake`` process group of world
  size n;
* ``initialize()``: one process per device under torchrun (gloo on CPU,
  NCCL on GPU), with a watchdog that names a lost peer;
* queries (``list_devices``, ``num_processes``, ``process_id``,
  ``device_rank``) read ``parity.torch_impl.runtime.state`` and change nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import os
import warnings
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

import parity
from parity.arg_checks import check_device_type
from parity.errors import ParityError
from parity.torch_impl.runtime import shutdown, state
from parity.torch_impl.runtime.state import torch_device
from parity.torch_impl.runtime.simulator import SimulatedRanksMode
from parity.torch_impl.runtime.torch_compat import fake_store

__all__ = ["device_rank", "get_device_count", "initialize", "list_devices", "num_processes",
           "process_id", "simulate", "torch_device"]


@contextlib.contextmanager
def simulate(n: int = 8, device: str = "cpu") -> Iterator[None]:
    """Run the torch backend on ``n`` simulated ranks in this process.

    ```python
    with torch_impl.simulate(8):
        mesh = parity.DeviceMesh((2, 4), ("data", "model"))
        x = torch_impl.distribute_tensor(np.ones((8, 8)), parity.TensorLayout(("data", "model"), mesh))
    ```

    ``device="cuda"`` keeps every simulated rank's block on one CUDA device.
    Raises ``ParityError`` for n < 1, when already simulating or inside a real
    process group, or for ``device="cuda"`` without CUDA.
    """
    FakeStore = fake_store()
    if not isinstance(n, int) or n < 1:
        raise ParityError(f"simulate(n) needs a positive int; got n={n!r}.")
    if device not in ("cpu", "cuda"):
        raise ParityError(f"simulate(device={device!r}): choose 'cpu' or 'cuda'.")
    if device == "cuda" and not torch.cuda.is_available():
        raise ParityError("simulate(device='cuda') needs a CUDA device; none is visible.")
    with state.lock:
        if state.current().mode != "plain":
            raise ParityError(
                f"simulate({n}) cannot start: the torch backend is already in "
                f"{state.current().mode!r} mode. Leave the current simulate() block, or "
                "do not mix simulate() with initialize()."
            )
        dist.init_process_group("fake", rank=0, world_size=n, store=FakeStore())
        state.set_runtime("simulated", n, device)
    try:
        with SimulatedRanksMode(n), parity.use_backend("torch"):
            yield
    finally:
        with state.lock:
            dist.destroy_process_group()
            state.set_runtime("plain", 1, "cpu")


def initialize(
    job_addresses: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    timeout_s: float = 300.0,
) -> None:
    """Start multi-process mode: one ``torch.distributed`` rank per process.

    Arguments default to torchrun's environment (``MASTER_ADDR``,
    ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``) and Keras's
    (``KERAS_DISTRIBUTION_JOB_ADDRESSES``, ``KERAS_DISTRIBUTION_NUM_PROCESSES``,
    ``KERAS_DISTRIBUTION_PROCESS_ID``). ``job_addresses`` is a comma-separated
    list of ``host:port``; the first is the coordinator. NCCL when CUDA is
    available, gloo otherwise. A rank that waits ``timeout_s`` on a lost peer
    fails with an error instead of hanging.

    Raises ``ParityError`` when simulating, when arguments are missing, or
    when they contradict each other.
    """
    env = os.environ
    job_addresses = job_addresses or env.get("KERAS_DISTRIBUTION_JOB_ADDRESSES")
    if num_processes is None:
        num_processes = _env_int("KERAS_DISTRIBUTION_NUM_PROCESSES", "WORLD_SIZE")
    if process_id is None:
        process_id = _env_int("KERAS_DISTRIBUTION_PROCESS_ID", "RANK")
    if num_processes is None or process_id is None:
        raise ParityError(
            "initialize() needs num_processes and process_id: pass them, run "
            "under torchrun, or set KERAS_DISTRIBUTION_NUM_PROCESSES and "
            "KERAS_DISTRIBUTION_PROCESS_ID."
        )
    if not 0 <= process_id < num_processes:
        raise ParityError(
            f"process_id={process_id} is outside [0, num_processes={num_processes})."
        )
    with state.lock:
        if state.current().mode == "simulated":
            raise ParityError("initialize() cannot run inside simulate().")
        if dist.is_initialized():
            if dist.get_world_size() != num_processes or dist.get_rank() != process_id:
                raise ParityError(
                    "torch.distributed is already initialized with world size "
                    f"{dist.get_world_size()} and rank {dist.get_rank()}, not "
                    f"{num_processes} and {process_id}."
                )
        else:
            init_method = "env://"
            if job_addresses:
                coordinator = job_addresses.split(",")[0].strip()
                init_method = f"tcp://{coordinator}"
            use_cuda = _one_gpu_per_local_rank(env)
            if use_cuda:
                torch.cuda.set_device(
                    int(env.get("LOCAL_RANK", process_id)) % torch.cuda.device_count())
            dist.init_process_group(
                "nccl" if use_cuda else "gloo",
                init_method=init_method,
                world_size=num_processes,
                rank=process_id,
                timeout=datetime.timedelta(seconds=timeout_s),
            )
            # Before the watchdog's own exit handler, so that it runs after it
            # (atexit is last-in, first-out): rank 0 keeps the store up for
            # the others until they are done, and only then lets it go.
            atexit.register(shutdown.destroy_at_normal_exit)
            from parity.torch_impl.runtime import watchdog

            watchdog.start(timeout_s)  # a lost peer ends this rank with its name
        backend_name = dist.get_backend()
        state.set_runtime(
            "multiprocess", dist.get_world_size(), "cuda" if backend_name == "nccl" else "cpu"
        )


def _one_gpu_per_local_rank(env: Any) -> bool:
    """Whether this process gets a GPU of its own (then NCCL, else gloo on CPU).

    NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), so with
    fewer visible GPUs than local ranks (torchrun's ``LOCAL_WORLD_SIZE``)
    every rank runs on CPU with gloo, with a warning that says so.
    """
    if not torch.cuda.is_available():
        return False
    local_ranks = int(env.get("LOCAL_WORLD_SIZE") or 1)
    gpus = torch.cuda.device_count()
    if local_ranks > gpus:
        warnings.warn(
            f"initialize(): {local_ranks} local ranks but {gpus} visible GPU(s); NCCL "
            "needs a GPU per rank, so this job runs on CPU with gloo. Start at most "
            f"{gpus} rank(s) per node to run on the GPUs.",
            stacklevel=3,
        )
        return False
    return True


def _env_int(*names: str) -> int | None:
    for name in names:
        if os.environ.get(name):
            return int(os.environ[name])
    return None


def num_processes() -> int:
    """Processes in the job: 1 when plain or simulated, else the world size."""
    now = state.current()
    return now.world_size if now.mode == "multiprocess" else 1


def process_id() -> int:
    """This process's rank (0 when plain or simulated)."""
    return dist.get_rank() if state.current().mode == "multiprocess" else 0


def list_devices(device_type: str | None = None) -> list[str]:
    """Devices of the job, ``["cpu:0", ...]`` or ``["gpu:0", ...]``.

    Simulated and multi-process: one device per rank. Plain: this process's
    CUDA devices, else ``["cpu:0"]``. ``device_type`` ("cpu" or "gpu")
    filters; raises ``ParityError`` for another value or a non-string.
    """
    now = state.current()
    device_type = check_device_type(device_type, "list_devices")
    if device_type is not None and device_type not in ("cpu", "gpu", "cuda"):
        raise ParityError(f"device_type={device_type!r}: choose 'cpu' or 'gpu'.")
    if now.mode == "plain":
        kind = "gpu" if torch.cuda.is_available() else "cpu"
        count = torch.cuda.device_count() if kind == "gpu" else 1
    else:
        kind = state.parity_device_kind(now.device_type)
        count = now.world_size
    wanted = None if device_type is None else state.parity_device_kind(device_type)
    if wanted is not None and wanted != kind:
        return []
    return [f"{kind}:{i}" for i in range(count)]


def get_device_count(device_type: str | None = None) -> int:
    """``len(list_devices(device_type))``."""
    return len(list_devices(device_type))


def device_rank(device: object) -> int:
    """The torch rank of a parity device name (``"cpu:3"`` -> 3).

    Raises ``ParityError`` for a malformed name or a rank outside the job.
    """
    text = str(device)
    kind, _, index = text.rpartition(":")
    if not index.isdigit() or kind not in ("cpu", "gpu", "cuda"):
        raise ParityError(f"Device {text!r} is not of the form 'cpu:N' or 'gpu:N'.")
    rank = int(index)
    now = state.current()
    world = now.world_size if now.mode != "plain" else len(list_devices())
    if rank >= world:
        raise ParityError(
            f"Device {text!r} is rank {rank}, but the job has {world} ranks "
            f"(mode {now.mode!r}). Fix: run inside simulate({rank + 1}) or "
            "with more processes."
        )
    return rank
