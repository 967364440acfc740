"""Keras's seeded random ops on torch under a distribution.

Keras's torch backend draws ``keras.random.normal(shape, seed=...)``,
``uniform``, ``randint``, ``categorical``, ``truncated_normal``, ``shuffle``
and a seeded ``dropout`` (``keras.layers.Dropout(rate, seed=...)``) from a
fresh ``torch.Generator`` seeded from ``draw_seed(seed)``. Two things went
wrong under parity:

* over simulated ranks torch's ``LocalTensorMode`` runs each op once per
  rank and restores *the default generator's* state before every rank, but
  not an explicit generator's: rank 0 drew the unsharded values, rank 1 the
  next ones, ... -- a "replicated" mask that differed per rank;
* with a ``SeedGenerator`` made under a distribution, its state is a
  replicated DTensor variable and ``SeedGenerator.next`` adds a plain tensor
  to it: outside a train step (no ``jax_semantics()``) DTensor raised "got
  mixed torch.Tensor and DTensor".

Here each of those backend functions runs inside the trainer's mixing
context, and ``torch_seed_generator`` seeds the *default* generator with
the very seed Keras computes (``int(first + second) & 0xFFFFFFFF``) and
returns no generator; the caller's generator state is given back after
the function: the pattern Keras's own ``gamma``, ``binomial`` and ``beta``
use. torch's CPU default generator and a fresh
``torch.Generator`` with the same seed make the same stream (both MT19937),
so every rank -- simulated or a gloo process -- draws exactly the values
plain Keras draws in one process; those laid out over a mesh then follow
``semantics.random``. On the ``meta`` device (symbolic shapes) Keras's own
function runs unchanged.
"""

from __future__ import annotations

import functools
import sys
import threading

from parity.torch_impl.keras.trainer import _in_mixing

# The backend functions that draw through ``torch_seed_generator`` or
# ``torch.manual_seed`` (keras/src/backend/torch/random.py).
FUNCTIONS = ("normal", "uniform", "randint", "categorical", "truncated_normal", "dropout",
             "shuffle", "gamma", "binomial", "beta")
_ORIGINAL: dict[str, object] = {}
_state = threading.local()


def _keras_torch_core():
    """Keras's torch core module: ``keras.src.backend.torch.core`` in
    keras 3.15, ``keras.src.backend.torch.ops.core`` in keras-nightly 3.16."""
    for name in ("keras.src.backend.torch.core", "keras.src.backend.torch.ops.core"):
        if name in sys.modules:
            return sys.modules[name]
    raise RuntimeError("Keras's torch backend is not imported: set KERAS_BACKEND=torch "
                       "before importing keras")


def _torch_seed_generator(seed):
    """Seed torch's default generator with Keras's seed for ``seed`` and
    return ``None`` (torch's ops then draw from the default generator); the
    enclosing wrapper gives the caller's state back.

    Raises ``RuntimeError`` when called outside one of ``FUNCTIONS`` (no
    wrapper would give the caller's generator state back)."""
    from keras.src.random.seed_generator import draw_seed

    import torch

    if _keras_torch_core().get_device() == "meta":
        return _ORIGINAL["torch_seed_generator"](seed)
    saved = getattr(_state, "saved", None)
    if not saved:
        raise RuntimeError(
            "parity's keras torch_seed_generator was called outside keras's backend random "
            f"functions {FUNCTIONS}; it reseeds torch's default generator, which only those "
            "wrappers give back. Fix: call keras.random.* instead.")
    first_seed, second_seed = draw_seed(seed)
    if saved[-1] is None:
        saved[-1] = torch.random.get_rng_state()
    torch.manual_seed(int(first_seed + second_seed) & 0xFFFFFFFF)
    return None


def _restoring_default_generator(fn):
    """``fn`` in the trainer's mixing context; if it reseeded torch's CPU
    generator (a seeded draw), the caller's state is given back after it
    (an unseeded draw -- Keras's ``dropout`` fast path -- advances the
    global generator, as in plain Keras)."""
    mixing = _in_mixing(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import torch

        if not hasattr(_state, "saved"):
            _state.saved = []
        _state.saved.append(None)
        try:
            return mixing(*args, **kwargs)
        finally:
            state = _state.saved.pop()
            if state is not None:
                torch.random.set_rng_state(state)

    return wrapper


def patches(keras) -> list[tuple]:
    """``(owner, attribute, replacement)`` for the torch backend's random
    module ``keras.random`` (``install.KerasModules``)."""
    import torch

    module = keras.random
    _ORIGINAL["torch_seed_generator"] = module.torch_seed_generator
    found = [(module, "torch_seed_generator", torch.compiler.disable(_torch_seed_generator))]
    for name in FUNCTIONS:
        found.append((module, name, _restoring_default_generator(getattr(module, name))))
    return found
