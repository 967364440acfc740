"""Batches and steps of the Keras torch trainer under a distribution (H7, H8).

* ``DistributedTorchEpochIterator`` replaces the torch trainer's
  ``TorchEpochIterator``: with a distribution set it iterates the same numpy
  batches the JAX trainer slices and lays every leaf out with
  ``distribute_data_input(leaf, distribution.get_data_layout(shape),
  batch_dim_name)``, exactly ``keras/src/backend/jax/trainer.py``'s
  ``_distribute_data``.
* ``train_on_batch``, ``test_on_batch``, ``predict_on_batch`` distribute
  their batch the same way.
* Steps, layer calls, the public trainer methods and the block of a
  distribution's ``scope()`` run inside ``mixing_context()``: plain tensors
  that meet DTensors count as replicated, and every op is JAX's -- also in
  a model's own code between layer calls (keras-hub's ``call_with_cache``),
  where DTensor's own ops gave what JAX never does (a masked partial sum a
  reshape breaks).
* Callbacks run on the main thread while DTensors may reach their logs.
* ``jit_compile=True`` compiles the steps with ``torch.compile`` under a
  distribution on initialized ranks, as without one; over simulated ranks
  they run eagerly, with one warning (see ``_should_torch_compile``).
* Attention with DTensor operands uses torch's math SDPA kernel (DTensor has
  no sharding rule for the CPU flash kernel's backward).
"""

from __future__ import annotations

import contextlib
import functools
import threading

from parity.torch_impl.keras import distribution_lib as kdl
from parity.torch_impl.keras.layout_check import warn_unmatched_keys

_ORIGINAL: dict[str, object] = {}
_state = threading.local()


def mixing_context():
    """The context in which plain tensors meet DTensors: the core's
    ``jax_semantics()``."""
    from parity.torch_impl.semantics import jax_semantics

    return jax_semantics()


def _distribution():
    from keras.src.distribution import distribution_lib

    return distribution_lib.distribution()


def _may_meet_dtensors() -> bool:
    from parity.torch_impl.runtime import state

    return _distribution() is not None or state.mode() != "plain"


@contextlib.contextmanager
def _mixing():
    """Enter ``mixing_context()`` once (outermost call) while a distribution
    is set or ranks exist (sharded variables can then meet plain tensors
    outside the scope); nested calls and plain runs add nothing."""
    if getattr(_state, "depth", 0) or not _may_meet_dtensors():
        yield
        return
    _state.depth = 1
    try:
        with mixing_context():
            yield
    finally:
        _state.depth = 0


def _in_mixing(fn):
    if getattr(fn, "_parity_mixing", False):
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _mixing():
            return fn(*args, **kwargs)

    wrapper._parity_mixing = True
    return wrapper


def distribute_data(data, layouts=None):
    """Each non-``None`` leaf of ``data`` laid out for the current
    distribution (``jax/trainer.py::_distribute_data``)."""
    from keras.src import tree

    distribution = _distribution()
    if distribution is None:
        return data
    if layouts is None:
        layouts = data_layouts(distribution, data)
    return tree.map_structure(
        lambda d, layout: None
        if d is None
        else kdl.distribute_data_input(d, layout, distribution.batch_dim_name),
        data,
        layouts,
    )


def data_layouts(distribution, data):
    from keras.src import tree

    return tree.map_structure(
        lambda d: None if d is None else distribution.get_data_layout(d.shape), data
    )


def _make_iterator_class():
    base = _ORIGINAL["TorchEpochIterator"]

    class DistributedTorchEpochIterator(base):
        """``TorchEpochIterator`` that distributes each batch when a
        distribution is set (as ``JAXEpochIterator`` does)."""

        def _get_iterator(self):
            from parity.torch_impl.runtime import state

            distribution = _distribution()
            if distribution is None:
                if state.mode() == "simulated":
                    return _outside_local_mode(super()._get_iterator())
                return super()._get_iterator()
            return self._get_distributed_iterator(distribution)

        def _get_distributed_iterator(self, distribution):
            layouts = None
            for data in self.data_adapter.get_numpy_iterator():
                if layouts is None:
                    layouts = data_layouts(distribution, data)
                yield distribute_data(data, layouts)

    return DistributedTorchEpochIterator


def _outside_local_mode(iterable):
    """Batches of a torch ``DataLoader`` fetched outside ``LocalTensorMode``
    (its index tensors must stay plain)."""
    from parity.torch_impl.runtime.torch_compat import maybe_disable_local_tensor_mode

    with maybe_disable_local_tensor_mode():
        iterator = iter(iterable)
    while True:
        with maybe_disable_local_tensor_mode():
            try:
                batch = next(iterator)
            except StopIteration:
                return
        yield batch


def _wrap_make(name):
    original = _ORIGINAL[name]
    attr = {
        "make_train_function": "train_function",
        "make_test_function": "test_function",
        "make_predict_function": "predict_function",
    }[name]

    step = attr.split("_")[0]

    @functools.wraps(original)
    def make(self, force=False):
        distribution = _distribution()
        if distribution is not None:  # a key that lays out nothing warns
            warn_unmatched_keys(self, distribution)
        original(self, force=force)
        fn = getattr(self, attr)
        if fn is not None and not getattr(fn, "_parity_mixing", False):
            if hasattr(fn, "_torchdynamo_orig_callable"):  # jit_compile=True
                from parity.torch_impl.keras.compiled import naming_compile_errors, static_shapes

                fn = naming_compile_errors(static_shapes(fn), self, step)
            setattr(self, attr, _in_mixing(fn))
        return getattr(self, attr)

    return make


def _should_torch_compile(self):
    """``jit_compile=True`` compiles the steps with ``torch.compile`` under a
    distribution too, on initialized ranks (``compile_support`` holds the
    workarounds that make a graph-broken Keras step with DTensors compile).
    Over simulated ranks (``simulate(n)``) the Keras step does not compile
    (torch 2.13: AOTAutograd fails on ``LocalTensorMode``'s per-rank tensors,
    "Multiple dispatch failed for 'torch._ops.aten.div.Tensor'"); there the
    steps run eagerly (the same values) and parity says so once, with that
    reason."""
    from parity.torch_impl.runtime import state

    if self.jit_compile and _distribution() is not None and state.mode() == "simulated":
        if not getattr(_state, "warned_jit", False):
            import warnings

            warnings.warn(
                "parity: jit_compile=True runs the steps eagerly over simulated ranks "
                "(simulate(n)): torch.compile fails on LocalTensorMode's per-rank tensors "
                "(AOTAutograd: \"Multiple dispatch failed for aten.div.Tensor\"). Under "
                "torchrun (initialize()) the steps are compiled.",
                stacklevel=2,
            )
            _state.warned_jit = True
        return False
    return _ORIGINAL["_should_torch_compile"](self)


def _train_on_batch(self, x, y=None, sample_weight=None, class_weight=None, return_dict=False):
    if _distribution() is not None:
        if class_weight is not None and sample_weight is None and y is not None:
            from keras.src.trainers.data_adapters import data_adapter_utils

            sample_weight = data_adapter_utils.class_weight_to_sample_weights(y, class_weight)
            class_weight = None
        x, y, sample_weight = distribute_data((x, y, sample_weight))
    with _mixing():
        return _ORIGINAL["train_on_batch"](
            self, x, y=y, sample_weight=sample_weight, class_weight=class_weight,
            return_dict=return_dict,
        )


def _test_on_batch(self, x, y=None, sample_weight=None, return_dict=False):
    x, y, sample_weight = distribute_data((x, y, sample_weight))
    with _mixing():
        return _ORIGINAL["test_on_batch"](
            self, x, y=y, sample_weight=sample_weight, return_dict=return_dict
        )


def _predict_on_batch(self, x):
    (x,) = distribute_data((x,))
    with _mixing():
        return _ORIGINAL["predict_on_batch"](self, x)


@contextlib.contextmanager
def _distribution_scope(self):
    """``Distribution.scope()``: the distribution current for the block, as
    Keras's, and the block inside ``mixing_context()`` (the outermost
    entry: a scope opened in a layer call adds nothing)."""
    with _ORIGINAL["scope"](self), _mixing():
        yield


def _wrap_dot_product_attention(original):
    """DTensor has no sharding rule for the backward of the CPU flash SDPA
    kernel torch picks by default; with DTensor operands use the math kernel
    (matmul, softmax), whose pieces DTensor shards."""

    @functools.wraps(original)
    def dot_product_attention(query, key, value, *args, **kwargs):
        from torch.distributed.tensor import DTensor

        if not any(isinstance(t, DTensor) for t in (query, key, value)):
            return original(query, key, value, *args, **kwargs)
        from torch.nn.attention import SDPBackend, sdpa_kernel

        if kwargs.get("flash_attention") is None:
            kwargs["flash_attention"] = False
        with sdpa_kernel([SDPBackend.MATH]):
            return original(query, key, value, *args, **kwargs)

    return dot_product_attention


def _configure_async_dispatch(self, callbacks):
    """No callbacks on a thread pool while DTensors may flow through logs:
    reading a distributed loss there would run collectives (or, simulated,
    ``LocalTensorMode``, which is thread-local) off the main thread."""
    _ORIGINAL["_configure_async_dispatch"](self, callbacks)
    if _may_meet_dtensors():
        self._async_train = self._async_test = self._async_predict = False


def _parity_runs() -> bool:
    """A distribution is set or ranks are simulated: parity, not the
    trainer's own torch.distributed code, handles the step."""
    from parity.torch_impl.runtime import state

    return _distribution() is not None or state.mode() == "simulated"


def _initialize_ddp(self):
    """keras-nightly wraps the model in ``DistributedDataParallel`` under a
    ``DataParallel`` on initialized ranks; with parity the variables are
    replicated DTensors whose gradients DTensor already reduces, so no
    wrapper (Keras's own path on real ranks without a distribution)."""
    if _parity_runs():
        return None
    return _ORIGINAL["_initialize_ddp"](self)


def _get_metrics_result(self):
    """keras-nightly all-reduces metric variables over the batch axis; with
    parity they already hold global values (DTensor reductions), so the
    base trainer's result."""
    if _parity_runs():
        return super(_ORIGINAL["trainer_class"], self).get_metrics_result()
    return _ORIGINAL["get_metrics_result"](self)


def _outputs_as_they_are(data):
    """keras-nightly's ``_gather_non_batch_axes`` turns predict outputs into
    this process's rows; parity's outputs stay global DTensors, converted to
    their global value like on JAX."""
    return data


def patches(keras) -> list[tuple]:
    """``(owner, attribute, replacement)`` for the trainer hooks, on the
    Keras modules ``keras`` (``install.KerasModules``); the originals they
    call are recorded in ``_ORIGINAL``. The trainer class is the one
    ``keras.Model`` inherits (``TorchTrainer`` in 3.15, ``Trainer`` in
    keras-nightly); its compile switch is ``_should_torch_compile`` or
    ``_use_torch_compile``."""
    cls = keras.model.Trainer
    found = []
    for name in ("make_train_function", "make_test_function", "make_predict_function",
                 "train_on_batch", "test_on_batch", "predict_on_batch", "fit", "evaluate",
                 "predict"):
        _ORIGINAL[name] = getattr(cls, name)
    compile_switch = next((n for n in ("_should_torch_compile", "_use_torch_compile")
                           if hasattr(cls, n)), None)
    if compile_switch is None:
        from parity.errors import KerasInstallError

        raise KerasInstallError(
            f"install_keras(): the torch trainer of Keras {keras.version} has neither "
            "_should_torch_compile nor _use_torch_compile. Nothing was patched.",
            keras_version=keras.version, module=keras.trainer.__name__,
        )
    _ORIGINAL["_should_torch_compile"] = getattr(cls, compile_switch)
    found.append((cls, compile_switch, _should_torch_compile))
    _ORIGINAL["trainer_class"] = cls
    if "_initialize_ddp" in vars(cls):  # keras-nightly's own torch distribution
        _ORIGINAL["_initialize_ddp"] = cls._initialize_ddp
        found.append((cls, "_initialize_ddp", _initialize_ddp))
    if "get_metrics_result" in vars(cls):
        _ORIGINAL["get_metrics_result"] = cls.get_metrics_result
        found.append((cls, "get_metrics_result", _get_metrics_result))
    if hasattr(keras.trainer, "_gather_non_batch_axes"):
        found.append((keras.trainer, "_gather_non_batch_axes", _outputs_as_they_are))
    if hasattr(keras.trainer, "distribute_data_input"):
        found.append((keras.trainer, "distribute_data_input", kdl.distribute_data_input))
    for name in ("make_train_function", "make_test_function", "make_predict_function"):
        found.append((cls, name, _wrap_make(name)))
    found += [(cls, "train_on_batch", _train_on_batch), (cls, "test_on_batch", _test_on_batch),
              (cls, "predict_on_batch", _predict_on_batch)]
    found += [(cls, name, _in_mixing(_ORIGINAL[name])) for name in ("fit", "evaluate", "predict")]
    _ORIGINAL["TorchEpochIterator"] = keras.trainer.TorchEpochIterator
    found.append((keras.trainer, "TorchEpochIterator", _make_iterator_class()))
    callbacks = keras.callback_list.CallbackList
    _ORIGINAL["_configure_async_dispatch"] = callbacks._configure_async_dispatch
    found.append((callbacks, "_configure_async_dispatch", _configure_async_dispatch))
    found.append((keras.nn, "dot_product_attention",
                  _wrap_dot_product_attention(keras.nn.dot_product_attention)))
    layer = keras.layer.Layer
    found.append((layer, "__call__", _in_mixing(layer.__call__)))
    distribution = keras.distribution.Distribution
    _ORIGINAL["scope"] = distribution.scope
    found.append((distribution, "scope", _distribution_scope))
    return found
