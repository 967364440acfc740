"""Import torchtitan 0.3.0 on a CPU machine without triton.

torchtitan imports ``triton`` at module level (CUDA kernels for MoE and MLA
that the llama3 path never launches). ``import_torchtitan()`` imports torch's
own modules first (so torch decides, without the stub, that triton is
absent), then puts the import-only stub in ``stub/`` on ``sys.path`` just
long enough to import torchtitan, then takes it off again."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

STUB = Path(__file__).resolve().parent / "stub"

# What the llama3 debug model, parallelize_llama and the trainer's pieces need.
MODULES = (
    "torchtitan.models.llama3",
    "torchtitan.components.loss",
    "torchtitan.components.optimizer",
    "torchtitan.distributed.activation_checkpoint",
    "torchtitan.distributed.utils",
)


# torchtitan (installed without its dependencies) and the ones the llama3
# model and parallelize path import.
PACKAGES = ("torchtitan", "spmd_types", "tyro")


def torchtitan_missing() -> str | None:
    """Why torchtitan cannot be imported here, or ``None`` when it can."""
    missing = [p for p in PACKAGES if importlib.util.find_spec(p) is None]
    if missing:
        return (f"torchtitan is not importable ({', '.join(missing)} not installed); "
                "bash scripts/torchtitan.sh installs torchtitan 0.3.0 into .venv and runs these")
    return None

# torch's modules that probe for triton on import, imported before the stub
# is on the path.
TORCH_FIRST = (
    "torch._dynamo",
    "torch._functorch.partitioners",
    "torch._inductor.codecache",
    "torch._inductor.runtime.triton_compat",
    "torch.distributed.pipelining",
    "torch.distributed.checkpoint",
    "torch.distributed.fsdp",
    "torch.distributed.tensor.parallel",
)


@contextlib.contextmanager
def _triton_stub():
    real = importlib.util.find_spec("triton") is not None
    if real:  # a real triton: use it
        yield
        return
    sys.path.insert(0, str(STUB))
    try:
        yield
    finally:
        sys.path.remove(str(STUB))
        for name in [m for m in sys.modules if m == "triton" or m.startswith("triton.")]:
            del sys.modules[name]  # torchtitan's modules keep their own reference


def import_torchtitan() -> dict[str, ModuleType]:
    """The modules in ``MODULES``, by name.

    Raises ImportError (torchtitan or one of its light dependencies missing:
    run ``bash scripts/torchtitan.sh``)."""
    import torch._dynamo  # noqa: F401  - torch's triton probe runs here, stub absent
    for name in TORCH_FIRST:
        importlib.import_module(name)

    with _triton_stub():
        return {name: importlib.import_module(name) for name in MODULES}


def use_cpu() -> None:
    """Point torchtitan's device type at "cpu": on a machine without an
    accelerator it falls back to "cuda" (``tools.utils.get_device_info``), and
    its modules copied the name at import."""
    import torch

    for name, module in list(sys.modules.items()):
        if name.startswith("torchtitan") and getattr(module, "device_type", None) == "cuda":
            module.device_type = "cpu"
            if hasattr(module, "device_module"):
                module.device_module = torch.cpu
