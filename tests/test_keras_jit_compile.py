"""Keras ``model.compile(jit_compile=True)`` under a distribution on parity's
Keras backend (issue 15, item 2): the train, test and predict steps run
through ``torch.compile`` (dynamo graphs built, counted here), with the
eager run's and JAX's values.

Under torchrun (gloo ranks) the steps compile; the graph breaks are the
backward (dynamo cannot trace ``loss.backward()``; parity runs it through
``compile_support``) and Keras's own (its optimizers read the learning rate
as a Python number: a data-dependent ``.item()``). Two workarounds in
``parity/torch_impl/semantics/compile_support.py`` make that graph-broken
step work: the backward runs untraced (pytorch#130978 family), and the
plain zero gradient the autograd engine makes for ``y_pred`` -- an output of
the forward graph the backward does not reach -- becomes a DTensor
(pytorch#173123). Over simulated ranks (``simulate(n)``) the steps run
eagerly and parity says so once (dynamo does not trace LocalTensorMode).

Tolerances as the Keras parity tests: losses and evaluate ``rtol=1e-5``,
predictions and weights ``atol=1e-4``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_keras_extra

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "keras_support" / "parity_driver.py"
LOSS_RTOL = 1e-5
WEIGHT_ATOL = 1e-4
# Graph breaks a compiled Keras step may have: the backward, and the
# learning rate Keras's torch optimizers pass as ``alpha=`` (``.item()``).
ALLOWED_BREAKS = ("Skip calling `torch.compiler.disable()`d function", "Data dependent operator")
# With LayoutMap output entries (``.*dense.*output``) parity relayouts each
# layer's output inside Keras's layer call; dynamo breaks its graph there
# (the relayout's argument conversion, and Keras's call context around it).
OUTPUT_LAYOUT_BREAKS = ALLOWED_BREAKS + (
    "Failed to convert args/kwargs to proxy", "Unsupported context manager",
    "mapping proxy affected by dictionary mutation")

pytestmark = [needs_keras_extra, pytest.mark.timeout(1800)]


def run_jax(configs: str, devices: int) -> dict[str, dict]:
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
               XLA_FLAGS="--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true")
    proc = subprocess.run(
        [sys.executable, str(DRIVER), "--configs", configs, "--devices", str(devices), "--jit",
         "--steps", "2"],
        env=env, capture_output=True, text=True, timeout=900, cwd=ROOT,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("PARITY_RESULT "):
            result = json.loads(line[len("PARITY_RESULT "):])
            results[result["config"]] = result
    return results


def run_torch(configs: str, nproc: int, out: Path, *extra: str) -> dict[str, list[dict]]:
    """Per config, every rank's eager and compiled results."""
    from torchrun import run_torchrun

    run_torchrun("keras_jit_worker.py", nproc=nproc, timeout=1700,
                 args=("--configs", configs, "--steps", "2", "--out", str(out), *extra))
    per_config: dict[str, list[dict]] = {}
    for path in sorted(out.parent.glob(out.name + ".rank*.jsonl")):
        for line in path.read_text().splitlines():
            result = json.loads(line[len("PARITY_RESULT "):])
            per_config.setdefault(result["config"], []).append(result)
    return per_config


def assert_same_values(ref: dict, got: dict) -> None:
    np.testing.assert_allclose(got["losses"], ref["losses"], rtol=LOSS_RTOL)
    for key in ref["evaluate"]:
        np.testing.assert_allclose(got["evaluate"][key], ref["evaluate"][key], rtol=LOSS_RTOL)
    np.testing.assert_allclose(got["predict"], ref["predict"], atol=WEIGHT_ATOL)
    assert set(got["weights"]) == set(ref["weights"])
    for key, value in ref["weights"].items():
        np.testing.assert_allclose(got["weights"][key], value, atol=WEIGHT_ATOL, err_msg=key)
    assert got["specs"] == ref["specs"]


def check_compiled(results: list[dict], jax: dict, nproc: int,
                   allowed_breaks: tuple[str, ...] = ALLOWED_BREAKS) -> None:
    assert sorted(r["rank"] for r in results if r["jit"]) == list(range(nproc))
    eager = {r["rank"]: r for r in results if not r["jit"]}
    for result in (r for r in results if r["jit"]):
        # It compiled: dynamo holds compiled code for each step, built graphs,
        # and broke them only where the module docstring says.
        assert all(n >= 1 for n in result["compiled_entries"].values()), result["compiled_entries"]
        assert result["graphs"] >= 3, result["graphs"]
        assert all(r.startswith(allowed_breaks) for r in result["break_reasons"]), result["break_reasons"]
        assert_same_values(eager[result["rank"]], result)
        assert_same_values(jax, result)
    for result in eager.values():
        assert result["graphs"] == 0 and not any(result["compiled_entries"].values())


@pytest.mark.multiprocess
@pytest.mark.slow
def test_jit_compile_model_parallel_mlp_compiles_on_2_ranks_and_matches_eager_and_jax(tmp_path):
    """Mesh (1, 2) ``batch, model``: dense_1 column-, dense_2 row-parallel;
    ``fit`` (2 steps, Adam), ``evaluate`` and ``predict``. Without the
    driver's output layouts (``.*dense.*output``; the 4-rank test has them):
    output layouts change placements, not values, so JAX's run keeps them."""
    jax = run_jax("mlp:mp", devices=2)
    results = run_torch("mlp:mp", 2, tmp_path / "jit", "--no-output-layouts")
    check_compiled(results["mlp:mp"], jax["mlp:mp"], nproc=2)


@pytest.mark.multiprocess
@pytest.mark.slow
def test_jit_compile_model_parallel_mlp_with_output_layouts_on_4_ranks_matches_eager_and_jax(
        tmp_path):
    """Mesh (2, 2) ``batch, model`` on 4 gloo ranks, with the driver's
    output layouts (``.*dense.*output`` -> ``("batch", None)``): ``fit`` (2
    steps, Adam), ``evaluate`` and ``predict`` compiled, equal to the eager
    run and to JAX's ``jit`` on 4 devices. Before parity compiled Keras's
    steps with ``dynamic=False`` (``keras/compiled.static_shapes``) the
    train step failed here with a RecursionError in AOTAutograd's tracer."""
    jax = run_jax("mlp:mp", devices=4)
    results = run_torch("mlp:mp", 4, tmp_path / "jit")
    check_compiled(results["mlp:mp"], jax["mlp:mp"], nproc=4, allowed_breaks=OUTPUT_LAYOUT_BREAKS)


def test_jit_compile_over_simulated_ranks_runs_eagerly_and_says_so_once():
    """Over ``simulate(n)`` the steps run eagerly, with one warning naming
    the reason, and the values of ``jit_compile=False``."""
    code = r'''
import os, warnings
os.environ["KERAS_BACKEND"] = "torch"
import numpy as np, keras
from parity import torch_impl
torch_impl.install_keras()
with torch_impl.simulate(2):
    dist = keras.distribution.DataParallel(devices=keras.distribution.list_devices())
    with dist.scope():
        losses = {}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for jit in (False, True, True):
                keras.utils.set_random_seed(0)
                model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
                model.compile(optimizer="sgd", loss="mse", jit_compile=jit)
                x = np.ones((4, 4), "float32")
                losses.setdefault(jit, []).append(float(model.train_on_batch(x, x[:, :2])))
    said = [str(w.message) for w in caught if "jit_compile=True" in str(w.message)]
    assert len(said) == 1 and "LocalTensorMode" in said[0], said
    assert losses[True] == [losses[False][0]] * 2, losses
    print("OK")
'''
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0 and "OK" in proc.stdout, (proc.stdout + proc.stderr)[-4000:]


def run_torch_keras(code: str) -> None:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0 and "OK" in proc.stdout, (proc.stdout + proc.stderr)[-4000:]


def test_compile_failure_names_the_model_step_and_layer():
    """When dynamo fails (its error's user stack ends in a layer's ``call``),
    parity raises ``KerasCompileError`` naming the model, the step and that
    layer; several layers of one class are all named, with the class."""
    run_torch_keras(r'''
import os, traceback
os.environ["KERAS_BACKEND"] = "torch"
import keras
from torch._dynamo.exc import Unsupported
from parity import torch_impl
from parity.errors import KerasCompileError
from parity.torch_impl.keras.compiled import compile_error
torch_impl.install_keras()

class Odd(keras.layers.Layer):
    def call(self, x):
        return x * 2

inputs = keras.Input((4,))
h = keras.layers.Dense(3, name="first")(inputs)
h = Odd(name="odd")(h)
model = keras.Model(inputs, keras.layers.Dense(2, name="second")(h), name="mlp")

def stack(cls):
    code = cls.call.__code__
    return traceback.StackSummary.from_list(
        [("/somewhere/trainer.py", 10, "train_step", None),
         (code.co_filename, code.co_firstlineno + 1, "call", None)])

err = compile_error(Unsupported("graph break", real_stack=stack(Odd)), model, "train")
assert isinstance(err, KerasCompileError) and err.layer == "odd", err
assert (err.model, err.step, err.category) == ("mlp", "train", "unsupported")
assert "'odd'" in str(err) and "train step of model 'mlp'" in str(err) and "jit_compile=False" in str(err)
err = compile_error(Unsupported("x", real_stack=stack(keras.layers.Dense)), model, "predict")
assert err.layer == "Dense (first, second)", err.layer
err = compile_error(Unsupported("x", real_stack=traceback.StackSummary()), model, "test")
assert err.layer is None and "outside the model's layers" in str(err)
print("OK")
''')


def test_plain_tangent_is_left_to_torch_outside_a_parity_backward():
    """The pytorch#173123 workaround acts only inside a backward that
    ``jax_semantics()`` started: elsewhere a plain tangent goes to torch's
    own check unchanged."""
    import types

    import torch
    from torch.distributed.tensor import DTensor

    from parity.torch_impl.semantics import compile_support

    meta = types.SimpleNamespace(original_subclass_type=DTensor, meta=((), None, None, False))
    assert compile_support._tangent_as_dtensor(torch.zeros(2), meta) is None


def test_static_shapes_recompiles_a_step_for_new_sizes_instead_of_going_symbolic(monkeypatch):
    """``keras/compiled.static_shapes``: Keras's ``torch.compile(step)``
    compiled again with ``dynamic=False``: a call with new sizes builds a
    new graph with those sizes, never one with symbolic sizes (what
    ``dynamic=None`` does on the second size)."""
    import torch

    from parity.torch_impl.keras.compiled import static_shapes

    def symbolic_graphs(compiled_fn):
        seen = []

        def backend(gm, example_inputs):
            seen.append(any(isinstance(s, torch.SymInt) for x in example_inputs
                            if isinstance(x, torch.Tensor) for s in x.shape)
                        or any(isinstance(x, torch.SymInt) for x in example_inputs))
            return gm.forward

        torch._dynamo.reset()
        fn = compiled_fn(backend)
        for n in (3, 4, 5):
            assert torch.equal(fn(torch.ones(n)), torch.full((n,), 2.0))
        return seen

    def step(x):
        return x * 2

    assert symbolic_graphs(lambda b: torch.compile(step, backend=b)) == [False, True]

    def with_backend(b):  # Keras calls torch.compile(step): the backend is torch's default
        compile_fn = torch.compile
        monkeypatch.setattr(torch, "compile", lambda fn, **kw: compile_fn(fn, backend=b, **kw))
        return static_shapes(torch.compile(step))

    assert symbolic_graphs(with_backend) == [False] * 3


def test_static_shapes_refuses_a_function_torch_compile_did_not_make():
    from parity.torch_impl.keras.compiled import static_shapes

    with pytest.raises(ValueError, match="not a torch.compile'd function"):
        static_shapes(lambda x: x)
