"""``install_keras()`` / ``uninstall_keras()`` on whatever Keras is installed
(keras 3.15 or keras-nightly 3.16), run in one subprocess with
``KERAS_BACKEND=torch`` by ``tests/test_keras_install.py``; one line per
check: ``CHECK <name> ok`` or ``CHECK <name> FAIL <json traceback>``.
"""

from __future__ import annotations

import os
import sys
import warnings

os.environ.setdefault("KERAS_BACKEND", "torch")
warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402

import keras  # noqa: E402

import parity  # noqa: E402
from parity import torch_impl as ti  # noqa: E402
from parity.errors import KerasInstallError  # noqa: E402
from parity.torch_impl.keras import distribution_lib as parity_lib  # noqa: E402
from parity.torch_impl.keras import install  # noqa: E402
from check_runner import run_check

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def snapshot() -> dict:
    """Identity of every attribute of every loaded ``keras.*`` module and of
    every class defined in one (what a patch could change)."""
    seen = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "keras" or name.startswith("keras.")):
            continue
        for attr, value in list(vars(module).items()):
            seen[(name, attr)] = id(value)
            if isinstance(value, type) and value.__module__ == name:
                for cattr, cvalue in list(vars(value).items()):
                    seen[(name, attr, cattr)] = id(cvalue)
    return seen


def changed(before: dict, after: dict) -> list:
    return sorted(str(k) for k in before if k in after and before[k] != after[k])


def fit_mlp():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.ones((8, 4), "float32")
    return model.fit(x, np.zeros((8, 2), "float32"), verbose=0).history["loss"]


@check
def check_failed_install_names_keras_version_and_module_and_patches_nothing():
    keras.src.backend.distribution_lib  # noqa: B018 - loaded before the snapshot
    before = snapshot()
    table = dict(install.MODULES, nn=("keras.src.backend.torch.no_such_nn",
                                      "keras.src.backend.torch.ops.no_such_nn"))
    try:
        install.install_keras(_modules=table)
    except KerasInstallError as err:
        assert err.keras_version == keras.version(), err.keras_version
        assert err.module == "keras.src.backend.torch.no_such_nn / keras.src.backend.torch.ops.no_such_nn"
        assert keras.version() in str(err) and "no_such_nn" in str(err), str(err)
        assert isinstance(err, parity.ParityError)
    else:
        raise AssertionError("install_keras() accepted a missing module")
    assert not install.is_installed()
    assert changed(before, snapshot()) == []


@check
def check_failure_midway_undoes_the_patches_already_applied():
    before = snapshot()

    class Refuses:
        def __setattr__(self, name, value):
            raise RuntimeError("forced failure")

    def failing_patches(keras_modules):
        return real(keras_modules) + [(Refuses(), "attribute", 1)]  # the last patch fails

    real, install._patches = install._patches, failing_patches
    try:
        install.install_keras()
    except RuntimeError as err:
        assert str(err) == "forced failure", err
    else:
        raise AssertionError("the failing patch did not raise")
    finally:
        install._patches = real
    assert not install.is_installed()
    assert changed(before, snapshot()) == []


@check
def check_install_finds_this_keras_modules():
    found = install.find_keras_modules()
    names = {k: m.__name__ for k, m in found.modules.items()}
    assert names["core"] in install.MODULES["core"], names
    assert isinstance(keras.Variable(np.ones(2, "float32")), found.core.Variable)
    assert found.model.Trainer in keras.Model.__mro__


@check
def check_install_replaces_keras_distribution_lib_and_uninstall_restores_it():
    from keras.src import backend as keras_backend
    from keras.src.distribution import distribution_lib as keras_distribution

    own = keras_backend.distribution_lib  # None on 3.15; Keras's module on nightly
    own_torch = getattr(keras.src.backend.torch, "distribution_lib", None)
    before = snapshot()
    ti.install_keras()
    assert keras_backend.distribution_lib is parity_lib
    assert keras_distribution.distribution_lib is parity_lib
    if own_torch is not None:
        assert keras.src.backend.torch.distribution_lib is parity_lib
    assert changed(before, snapshot()) != []
    ti.uninstall_keras()
    assert keras_backend.distribution_lib is own
    assert keras_distribution.distribution_lib is own
    assert getattr(keras.src.backend.torch, "distribution_lib", None) is own_torch
    assert changed(before, snapshot()) == []
    assert not install.is_installed()


@check
def check_keras_own_path_works_after_uninstall():
    with ti.keras_install_scope():
        pass
    losses = fit_mlp()
    assert np.isfinite(losses).all(), losses


@check
def check_install_after_uninstall_distributes_again():
    with ti.keras_install_scope(), ti.simulate(8):
        from keras import distribution as kd

        mesh = kd.DeviceMesh((2, 4), ("batch", "model"), kd.list_devices())
        layout_map = kd.LayoutMap(mesh)
        layout_map[".*d/kernel"] = (None, "model")
        with kd.ModelParallel(layout_map=layout_map, batch_dim_name="batch").scope():
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, name="d")])
            spec = ti.describe(model.layers[0].kernel.value).spec
        assert spec == ((), ("model",)), spec



if __name__ == "__main__":
    from keras_under_test import assert_keras_under_test

    assert_keras_under_test()
    print("KERAS_VERSION " + keras.version(), flush=True)
    for fn in CHECKS:
        if not sys.argv[1:] or fn.__name__ in sys.argv[1:]:
            run_check(fn)
