"""DTensor-backed Keras variables on torch (hooks H5, H9, H11).

``patches()`` lists the methods of the torch backend's ``Variable``
(``keras.src.backend.torch.core`` or, in keras-nightly, ``...torch.ops.core``)
(every Keras variable class on torch inherits them) and the torch backend's
``convert_to_numpy``:

* a variable created under a distribution gets ``distribution.get_variable_layout``
  (as ``JaxVariable._initialize_layout`` does) and a ``Parameter`` over a
  sharded DTensor of that layout;
* initializers run outside ``LocalTensorMode`` (one host draw, then slicing,
  like JAX), so simulated ranks hold slices of one value;
* ``assign`` lays the value out with the variable's layout and copies into
  the same ``Parameter`` object (the one the optimizer and
  ``TorchLayer.torch_params`` hold), inside or outside the scope;
* ``convert_to_numpy`` of a DTensor gives the global value;
* an op on a variable that reached the variable's ``__torch_function__``
  (``plain_tensor * variable``, ``torch.mul(x, variable)``: the operand torch
  tries first is not the variable, so its ``__rmul__`` never runs) runs its
  unwrapped values under ``jax_semantics()`` when that is on: a plain tensor
  meeting the variable's DTensor is replicated, as a JAX array meeting a
  sharded one is (keras-hub's ``GptOssLayerNormalization`` computes
  ``x * self.scale`` on a plain tensor when Keras infers its decoder's
  output shape).
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from torch.distributed.tensor import DTensor

from parity.torch_impl.keras import distribution_lib as kdl
from parity.torch_impl.keras.trainer import _in_mixing, _mixing
from parity.torch_impl.collectives.gather import all_gather_variable
from parity.torch_impl.semantics import mode as semantics_mode

_ORIGINAL: dict[str, object] = {}


def _no_local_mode():
    from parity.torch_impl.runtime.torch_compat import maybe_disable_local_tensor_mode

    return maybe_disable_local_tensor_mode()


def _is_float(dtype) -> bool:
    return dtype.is_floating_point or dtype.is_complex


def _initialize_layout(self):
    from keras.src.backend.common import global_state

    distribution = global_state.get_global_attribute("distribution")
    if self._layout is None and distribution is not None:
        self._layout = distribution.get_variable_layout(self)


def _initialize(self, value):
    # variable.shape is needed by get_variable_layout (common code sets it
    # only after _initialize).
    self._shape = self._validate_shape(tuple(value.shape))
    _initialize_layout(self)
    if self._layout is None:
        if isinstance(value, DTensor) and not isinstance(value, torch.nn.Parameter):
            value = kdl.to_numpy(value)  # a plain variable holds the full value
        with _no_local_mode():
            if not isinstance(value, torch.Tensor) or _is_local(value):
                value = self._convert_to_tensor(kdl._host_value(value), dtype=self._dtype)
            if isinstance(value, torch.nn.Parameter) or _is_float(
                self._convert_to_tensor(value, dtype=self._dtype).dtype
            ):
                return _ORIGINAL["_initialize"](self, value)
            # Keras's torch Variable asks integer values for gradients (an
            # error); JAX keeps them. A plain Parameter without grad.
            get_device = _ORIGINAL["core"].get_device
            tensor = self._convert_to_tensor(value, dtype=self._dtype)
            self._value = torch.nn.Parameter(tensor, requires_grad=False).to(get_device())
            return None
    to_torch_dtype = _ORIGINAL["core"].to_torch_dtype
    if not isinstance(value, DTensor):
        with _no_local_mode():
            value = kdl._host_value(value)
            value = torch.as_tensor(np.asarray(value) if not isinstance(value, torch.Tensor) else value)
            value = value.detach().to(to_torch_dtype(self._dtype))
    elif value.dtype != to_torch_dtype(self._dtype):
        value = value.detach().to(to_torch_dtype(self._dtype))
    param = kdl.distribute_variable(value, self._layout)
    param.requires_grad_(bool(self.trainable) and _is_float(param.dtype))
    self._value = param


def _is_local(value) -> bool:
    return getattr(value, "_local_tensors", None) is not None


def _initialize_with_initializer(self, initializer):
    _initialize_layout(self)
    # One host draw outside LocalTensorMode: inside it every simulated rank
    # would draw its own random values.
    with _no_local_mode():
        value = self._convert_to_tensor(initializer(self._shape, dtype=self._dtype))
    self._initialize(value)


def _direct_assign(self, value):
    current = self._value
    if self._layout is not None and isinstance(current, DTensor):
        if (isinstance(value, DTensor) and value.device_mesh == current.device_mesh
                and tuple(value.placements) == tuple(current.placements)):
            # Already in the variable's layout (the usual case inside a
            # step): copy, without the layout conversion torch.compile would
            # have to trace (it breaks the graph on the mesh's numpy devices).
            with torch.no_grad():
                current.copy_(value)
            return
        if not isinstance(value, DTensor):
            value = kdl._host_value(value)
        value = kdl.distribute_tensor(value, self._layout)
        with torch.no_grad():
            current.copy_(value)
        return
    if isinstance(value, DTensor) and not isinstance(current, DTensor):
        # A plain variable (made outside the scope) updated from distributed
        # values: keep the full value.
        value = kdl._host_value(all_gather_variable(value).to_local())
    elif _is_local(value) and not _is_local(current):
        value = kdl._host_value(value)
    with torch.no_grad():
        current.copy_(value)


def _torch_function(cls, func, types, args=(), kwargs=None):
    """Keras's torch ``Variable.__torch_function__`` (each variable operand
    replaced by its value), the call run as ``jax_semantics()`` runs it when
    a value is a DTensor (entered here when a distribution is set or ranks
    exist and no scope is on, as the variable's ``_MIXING_METHODS`` do)."""
    Variable = _ORIGINAL["core"].Variable
    args = [a.value if isinstance(a, Variable) else a for a in args]
    kwargs = {k: v.value if isinstance(v, Variable) else v for k, v in (kwargs or {}).items()}
    if not any(isinstance(v, DTensor) for v in (*args, *kwargs.values())):
        return func(*args, **kwargs)
    if semantics_mode.active():  # the mode met the variable and is popped now
        return semantics_mode.dispatch_unwrapped(func, tuple(args), kwargs)
    with _mixing():  # outside any step or layer call, as the variable's own operators
        return func(*args, **kwargs)


def convert_to_numpy(x):
    if isinstance(x, (list, tuple)):
        return np.array([convert_to_numpy(e) for e in x])
    if isinstance(x, DTensor):
        out = kdl.to_numpy(x.detach())
        return np.array(out)
    if _is_local(x):
        x = kdl._host_value(x)
    return _ORIGINAL["convert_to_numpy"](x)


def _rebinding(original, replacement) -> list[tuple]:
    """``(module, attribute, replacement)`` for every ``keras.*`` module
    attribute that is ``original`` (star imports copied the reference)."""
    found = []
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "keras" or name.startswith("keras.")):
            continue
        for attr, value in list(vars(module).items()):
            if value is original:
                found.append((module, attr, replacement))
    return found


# Methods of KerasVariable that compute with the value: run them where plain
# tensors meeting DTensors count as replicated (``kernel.assign_add(numpy)``
# outside the scope works on JAX).
_MIXING_METHODS = (
    "assign", "assign_add", "assign_sub",
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
    "__truediv__", "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__",
    "__rmod__", "__pow__", "__rpow__", "__matmul__", "__rmatmul__", "__and__",
    "__rand__", "__or__", "__ror__", "__xor__", "__rxor__", "__eq__", "__ne__",
    "__lt__", "__le__", "__gt__", "__ge__", "__neg__", "__pos__", "__abs__",
    "__invert__",
)


def patches(keras) -> list[tuple]:
    """``(owner, attribute, replacement)`` for the variable hooks, on the
    Keras modules ``keras`` (``install.KerasModules``); the originals they
    call are recorded in ``_ORIGINAL``."""
    KerasVariable = keras.variables.Variable
    found = []
    for name in _MIXING_METHODS:
        original = KerasVariable.__dict__.get(name)
        if original is not None:
            found.append((KerasVariable, name, _in_mixing(original)))
    cls = keras.core.Variable
    _ORIGINAL["core"] = keras.core
    _ORIGINAL["_initialize"] = cls._initialize
    _ORIGINAL["convert_to_numpy"] = keras.core.convert_to_numpy
    found += [
        (cls, "_initialize", _initialize),
        (cls, "_direct_assign", _direct_assign),
        (cls, "_initialize_with_initializer", _initialize_with_initializer),
        (cls, "_initialize_layout", _initialize_layout),
        (cls, "__torch_function__", classmethod(_torch_function)),
    ]
    return found + _rebinding(keras.core.convert_to_numpy, convert_to_numpy)
