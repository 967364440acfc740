"""``install_keras()`` / ``uninstall_keras()``: make Keras 3's distribution
API run on torch through parity, and give Keras its own back.

```python
import os
os.environ["KERAS_BACKEND"] = "torch"
import keras
from parity import torch_impl
torch_impl.install_keras()
```

Keras moves its torch modules between releases (keras 3.15:
``keras.src.backend.torch.core``; keras-nightly 3.16:
``keras.src.backend.torch.ops.core``, and a ``distribution_lib`` of its own);
``_KerasModules`` finds each module under the names it has had. Installing
is all or nothing: every patch is recorded as it is applied, and if any step
fails, the applied ones are undone before the error propagates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib
import threading
import types
import warnings
from collections.abc import Iterator
from typing import Any

from parity.errors import KerasInstallError, ParityError

_lock = threading.Lock()
# (owner, attribute, had it, original value), in the order applied.
_applied: list[tuple[Any, str, bool, Any]] = []
_installed = False

# Each module the shim patches, under every name Keras has given it.
MODULES = {
    "backend": ("keras.src.backend",),
    "distribution": ("keras.src.distribution.distribution_lib",),
    "torch_backend": ("keras.src.backend.torch",),
    "core": ("keras.src.backend.torch.core", "keras.src.backend.torch.ops.core"),
    "nn": ("keras.src.backend.torch.nn", "keras.src.backend.torch.ops.nn"),
    "random": ("keras.src.backend.torch.random",),
    "trainer": ("keras.src.backend.torch.trainer",),
    "variables": ("keras.src.backend.common.variables",),
    "layer": ("keras.src.layers.layer",),
    "callback_list": ("keras.src.callbacks.callback_list",),
    "model": ("keras.src.models.model",),
}


@dataclasses.dataclass(frozen=True)
class KerasModules:
    """The Keras modules the shim patches, found for this Keras version."""

    version: str
    modules: dict

    def __getattr__(self, key: str) -> types.ModuleType:
        if key not in self.modules:
            raise AttributeError(key)
        return self.modules[key]


def _keras_version() -> str:
    import keras

    return keras.version()


def _import_first(key: str, names: tuple[str, ...], version: str) -> types.ModuleType:
    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as err:
            # Only "this name does not exist" moves on; a module that exists
            # but fails to import is Keras's error and propagates.
            if err.name is None or not name.startswith(err.name):
                raise
    raise KerasInstallError(
        f"install_keras(): Keras {version} has none of the modules "
        f"{' / '.join(names)} ({key}); parity supports the module layouts of "
        "keras 3.15 and keras-nightly 3.16. Nothing was patched. Fix: install a "
        "supported Keras, or report this Keras version to parity.",
        keras_version=version, module=" / ".join(names),
    )


def find_keras_modules(modules: dict[str, tuple[str, ...]] | None = None) -> KerasModules:
    """Import each module the shim patches under the first name this Keras
    has; ``KerasInstallError`` (naming the Keras version and the names tried)
    when one has none."""
    version = _keras_version()
    table = MODULES if modules is None else modules
    return KerasModules(version, {k: _import_first(k, names, version) for k, names in table.items()})


def _stale_variables() -> int:
    """Live Keras variables that a distribution should have laid out but that
    hold a plain value (made before ``install_keras()``): any plain variable
    while a distribution is set or while a ``Distribution`` object is alive
    (torch Keras records no layout, so a variable made in an exited scope
    cannot be told apart), and any variable with a layout but a plain value."""
    from keras.src.backend.common import global_state
    from keras.src.backend.common.variables import Variable
    from keras.src.distribution.distribution_lib import Distribution
    from torch.distributed.tensor import DTensor

    distribution = global_state.get_global_attribute("distribution")
    plain, laid_out, distributions = 0, 0, 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            try:
                if isinstance(obj, Distribution):
                    distributions += 1
                    continue
                if not isinstance(obj, Variable):
                    continue
            except Exception:  # noqa: BLE001 - objects with odd __class__
                continue
            value = getattr(obj, "_value", None)
            if value is None or isinstance(value, DTensor):
                continue
            plain += 1
            if getattr(obj, "_layout", None) is not None:
                laid_out += 1
    if distribution is not None or distributions:
        return plain
    return laid_out


def _patches(keras: KerasModules) -> list[tuple[Any, str, Any]]:
    """Every ``(owner, attribute, replacement)`` the shim sets."""
    from parity.torch_impl.keras import distribution_lib, seeded_random, trainer, variables

    found = [
        (keras.backend, "distribution_lib", distribution_lib),  # H1
        (keras.distribution, "distribution_lib", distribution_lib),  # H2
    ]
    if hasattr(keras.torch_backend, "distribution_lib"):
        # keras-nightly's own torch distribution_lib, which its modules
        # import by attribute at call time: parity's stands in for it.
        found.append((keras.torch_backend, "distribution_lib", distribution_lib))
    return (found + variables.patches(keras) + trainer.patches(keras)
            + seeded_random.patches(keras))


def _apply(patches: list[tuple[Any, str, Any]]) -> None:
    for owner, name, value in patches:
        had = name in vars(owner)
        original = vars(owner).get(name)
        setattr(owner, name, value)
        _applied.append((owner, name, had, original))


def _restore() -> None:
    while _applied:
        owner, name, had, original = _applied.pop()
        if had:
            setattr(owner, name, original)
        else:
            delattr(owner, name)


def install_keras(*, _modules: dict[str, tuple[str, ...]] | None = None) -> None:
    """Install parity as the distribution backend of Keras 3 on torch.

    After it, ``keras.distribution`` (``list_devices``, ``initialize``,
    ``DeviceMesh``, ``TensorLayout``, ``distribute_tensor``, ``DataParallel``,
    ``ModelParallel`` with ``LayoutMap``) works with ``KERAS_BACKEND=torch``:
    variables made under a distribution are sharded DTensors, ``fit`` /
    ``evaluate`` / ``predict`` distribute each batch as the JAX trainer does.
    Where Keras ships its own torch ``distribution_lib`` (keras-nightly),
    parity's replaces it until ``uninstall_keras()``. Idempotent. Use
    ``torch_impl.simulate(n)`` for n simulated devices in one process, or run
    under ``torchrun`` and call ``keras.distribution.initialize()``.

    Raises (and then nothing is patched):

    * ``KerasInstallError`` when the Keras backend is not torch, or a module
      the shim patches is not found in this Keras (the error names the Keras
      version and the module names tried);
    * ``ParityError`` when variables were already created under a
      distribution (call it right after ``import keras``).

    ``_modules`` replaces the module table (tests force a failure with it).
    """
    global _installed
    with _lock:
        if _installed:
            return
        import keras

        version = keras.version()
        backend = keras.config.backend()
        if backend != "torch":
            raise KerasInstallError(
                f"install_keras() needs the torch backend of Keras, but Keras {version} runs "
                f"on {backend!r}. Fix: set KERAS_BACKEND=torch before importing keras.",
                keras_version=version,
            )
        stale = _stale_variables()
        if stale:
            raise ParityError(
                f"install_keras() was called after {stale} Keras variable(s) were "
                "created while a keras.distribution existed; they hold plain, "
                "unsharded values. "
                "Fix: call parity.torch_impl.install_keras() right after `import keras`, "
                "before creating a distribution or any model."
            )
        try:
            _apply(_patches(find_keras_modules(_modules)))
        except BaseException:
            _restore()
            raise
        _installed = True


def uninstall_keras() -> None:
    """Undo ``install_keras()``: every Keras attribute it replaced gets its
    original back (keras-nightly's own torch ``distribution_lib`` included).
    Variables created while parity was installed keep their DTensor values.
    A no-op when parity is not installed."""
    global _installed
    with _lock:
        _restore()
        _installed = False


@contextlib.contextmanager
def keras_install_scope() -> Iterator[None]:
    """A context manager: ``install_keras()`` for the duration of a ``with`` block, then
    ``uninstall_keras()`` (also when the block raises)."""
    install_keras()
    try:
        yield
    finally:
        uninstall_keras()


def is_installed() -> bool:
    """Whether parity is installed into Keras now (a predicate; the context
    manager is ``keras_install_scope``)."""
    return _installed
