"""``install_keras()``: make Keras 3's distribution API run on torch through parity.

```python
import os
os.environ["KERAS_BACKEND"] = "torch"
import keras
from parity import torch_impl
torch_impl.install_keras()
```
"""

from __future__ import annotations

import gc
import warnings
import threading

from parity.errors import ParityError

_lock = threading.Lock()
_installed = False


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


def install_keras() -> None:
    """Install parity as the distribution backend of Keras 3 on torch.

    After it, ``keras.distribution`` (``list_devices``, ``initialize``,
    ``DeviceMesh``, ``TensorLayout``, ``distribute_tensor``, ``DataParallel``,
    ``ModelParallel`` with ``LayoutMap``) works with ``KERAS_BACKEND=torch``:
    variables made under a distribution are sharded DTensors, ``fit`` /
    ``evaluate`` / ``predict`` distribute each batch as the JAX trainer does.
    Idempotent. Use ``torch_impl.simulate(n)`` for n simulated devices in one
    process, or run under ``torchrun`` and call
    ``keras.distribution.initialize()``.

    Raises ``ParityError`` when the Keras backend is not torch, or when
    variables were already created under a distribution (call it right after
    ``import keras``).
    """
    global _installed
    with _lock:
        if _installed:
            return
        import keras

        backend = keras.config.backend()
        if backend != "torch":
            raise ParityError(
                f"install_keras() needs the torch backend of Keras, but Keras runs "
                f"on {backend!r}. Fix: set KERAS_BACKEND=torch before importing keras."
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
        from keras.src import backend as keras_backend
        from keras.src.distribution import distribution_lib as keras_distribution

        from parity.torch_impl.keras import distribution_lib, trainer, variables

        keras_backend.distribution_lib = distribution_lib  # H1
        keras_distribution.distribution_lib = distribution_lib  # H2
        variables.install()
        trainer.install()
        _installed = True


def is_installed() -> bool:
    return _installed
