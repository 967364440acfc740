"""Run Keras's own distribution tests, as shipped in the installed keras
package, under one backend, and write each test's outcome as JSON.

    python tests/keras_support/shipped.py {jax|torch} OUT.json [FILE[::NODE] ...]

FILE is relative to ``keras/src`` (default: ``SHIPPED_BOTH``). The run is its
own process because Keras reads ``KERAS_BACKEND`` at import, and because
``MultiProcessInitializeTest.tearDown`` clears ``os.environ``.

* jax: 8 CPU devices (``--xla_force_host_platform_device_count=8``).
* torch: ``parity.torch_impl.install_keras()`` before collection (the test
  modules bind ``keras.src.backend.distribution_lib`` at import), and the
  whole run inside ``torch_impl.simulate(8)``. The ``skipif(backend() !=
  "jax")`` markers whose reason says only JAX *has the backend distribution
  lib* are lifted: with parity installed, torch has one.
* both: TensorFlow is not installed; a stub ``tensorflow`` module lets the
  test files import, and any use of it skips that test (on both backends).
"""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

# Files that are not JAX internals: run on both backends and compared.
SHIPPED_BOTH = [
    "distribution/distribution_lib_test.py",
    "trainers/data_adapters/data_adapter_utils_test.py",
]
# Tests of JAX internals (jax.sharding types, jax.jit, jax.distributed):
# run on JAX for the tally, excluded on torch (see the README (Keras section)).
SHIPPED_JAX_ONLY = [
    "backend/jax/distribution_lib_test.py",
    "backend/jax/trainer_test.py",
    "backend/jax/jax_multi_process_distribution_test.py",
    "initializers/initializer_test.py::InitializersLayoutTest",
    "trainers/trainer_test.py::JAXTrainerCorrectnessTest",
]
LIFTED_REASONS = (
    "Only JAX has the backend to mock at the moment",
    "Only JAX has the proper backend distribution lib",
)


class _TensorFlowStub(types.ModuleType):
    """``import tensorflow as tf`` works; ``tf.<anything>`` skips the test."""

    __path__: list = []

    def __init__(self, name):
        super().__init__(name)
        import importlib.machinery

        self.__spec__ = importlib.machinery.ModuleSpec(name, None)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        import pytest

        pytest.skip(f"needs tensorflow (tf.{name}); not installed")


class _Plugin:
    def __init__(self, backend: str):
        self.backend = backend
        self.results: dict[str, dict] = {}

    def pytest_collection_modifyitems(self, items):
        if self.backend != "torch":
            return
        for item in items:
            for node in item.listchain():
                node.own_markers[:] = [
                    m for m in node.own_markers
                    if not (m.name == "skipif" and m.kwargs.get("reason") in LIFTED_REASONS)
                ]

    def pytest_runtest_logreport(self, report):
        entry = self.results.setdefault(report.nodeid, {"outcome": "passed", "detail": ""})
        if report.when == "call" or report.outcome != "passed":
            if entry["outcome"] == "passed" or report.outcome == "failed":
                entry["outcome"] = report.outcome
                if report.outcome == "skipped":
                    longrepr = report.longrepr
                    entry["detail"] = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
                elif report.outcome == "failed":
                    entry["detail"] = str(report.longrepr)[-1500:]


def main(argv: list[str]) -> int:
    backend, out, *files = argv
    files = files or SHIPPED_BOTH
    os.environ["KERAS_BACKEND"] = backend
    if backend == "jax":
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
        )
    import pytest

    import keras
    from keras_under_test import assert_keras_under_test

    assert_keras_under_test()  # after KERAS_BACKEND is set: Keras picks its backend at import
    if backend == "jax":
        import jax

        # Start XLA now: MultiProcessInitializeTest.tearDown clears
        # os.environ, XLA_FLAGS included, before any later test starts it.
        assert jax.device_count() == 8, jax.devices()
    sys.modules.setdefault("tensorflow", _TensorFlowStub("tensorflow"))

    src = Path(keras.__file__).parent / "src"
    paths = [str(src / f) for f in files]
    args = [*paths, "-q", "-p", "no:cacheprovider", "-c", os.devnull,
            "--rootdir", str(src), "-W", "ignore"]
    plugin = _Plugin(backend)
    if backend == "torch":
        from parity import torch_impl

        torch_impl.install_keras()
        with torch_impl.simulate(8):
            code = pytest.main(args, plugins=[plugin])
    else:
        code = pytest.main(args, plugins=[plugin])
    Path(out).write_text(json.dumps({"backend": backend, "files": files,
                                     "results": plugin.results}, indent=1))
    return 0 if code in (0, 1, 5) else int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
