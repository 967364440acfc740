"""Keras 3 on torch through parity: behaviour checks, run in one subprocess.

``KERAS_BACKEND`` must be set before keras is imported, so
``tests/test_keras_torch.py`` runs this file with ``KERAS_BACKEND=torch`` and
reads one line per check: ``CHECK <name> ok`` or ``CHECK <name> FAIL <json
traceback>``. ``python tests/keras_support/torch_checks.py [NAME ...]`` runs
some or all of them by hand.
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
import warnings

os.environ.setdefault("KERAS_BACKEND", "torch")
warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402

import keras  # noqa: E402
from keras import distribution as kd  # noqa: E402

import parity  # noqa: E402
from parity import torch_impl as ti  # noqa: E402
from check_runner import run_check

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def spec(x):
    return tuple(tuple(e) for e in ti.describe(x.value if hasattr(x, "value") else x).spec)


def mesh24():
    return kd.DeviceMesh((2, 4), ("batch", "model"), kd.list_devices())


def mp_distribution():
    layout_map = kd.LayoutMap(mesh24())
    layout_map["d1/kernel"] = (None, "model")
    layout_map["d1/bias"] = ("model",)
    layout_map["d2/kernel"] = ("model", None)
    return kd.ModelParallel(layout_map=layout_map, batch_dim_name="batch")


def mlp(compile_kwargs=None):
    inputs = keras.Input((8,))
    h = keras.layers.Dense(16, activation="relu", name="d1")(inputs)
    outputs = keras.layers.Dense(4, name="d2")(h)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="adam", loss="mse", **(compile_kwargs or {}))
    return model


def data(n=32):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 8)).astype("float32"), rng.normal(size=(n, 4)).astype("float32")


# --- before install -----------------------------------------------------------


def check_install_after_variables_raises():
    distribution = kd.DataParallel(devices=["cpu:0"])
    with distribution.scope():
        v = keras.Variable(np.ones((2, 2), "float32"))
    try:
        ti.install_keras()
    except parity.ParityError as err:
        assert "install_keras()" in str(err) and "variable" in str(err), err
    else:
        raise AssertionError("install_keras() accepted a variable made under a distribution")
    del v
    gc.collect()
    ti.install_keras()
    ti.install_keras()  # idempotent


# --- after install, on 8 simulated devices ------------------------------------


@check
def check_list_devices_and_count():
    assert kd.list_devices() == [f"cpu:{i}" for i in range(8)], kd.list_devices()
    assert kd.get_device_count() == 8
    assert kd.list_devices("gpu") == []


@check
def check_backend_mesh_and_layout():
    from torch.distributed.tensor import Replicate, Shard

    mesh = mesh24()
    torch_mesh = mesh.backend_mesh
    assert tuple(torch_mesh.shape) == (2, 4) and torch_mesh.mesh_dim_names == ("batch", "model")
    layout = kd.TensorLayout(("model", None), mesh)
    assert layout.backend_layout.placements == (Replicate(), Shard(0))
    assert ti._to_backend_layout(layout).spec == (("model",), ())
    assert str(ti._to_backend_device("cpu:3")) == "cpu"
    try:
        ti._to_backend_layout(kd.TensorLayout(("model",)))
    except ValueError as err:
        assert "device mesh is not set" in str(err)
    else:
        raise AssertionError("no error for a layout without mesh")


@check
def check_distribute_tensor():
    mesh = mesh24()
    layout = kd.TensorLayout(("batch", "model"), mesh)
    host = np.arange(64, dtype="float32").reshape(8, 8)
    x = kd.distribute_tensor(host, layout)
    assert spec(x) == (("batch",), ("model",))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(x), host)
    assert tuple(ti.local_block(x, 5).shape) == (4, 2)
    assert kd.distribute_tensor(x, layout) is x  # no relayout when unnecessary
    y = kd.distribute_tensor(x, kd.TensorLayout((None, "batch"), mesh))
    assert spec(y) == ((), ("batch",))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(y), host)
    symbolic = keras.KerasTensor((8, 8))
    assert kd.distribute_tensor(symbolic, layout) is symbolic
    pair = kd.distribute_tensor((host, host), layout)
    assert all(spec(p) == (("batch",), ("model",)) for p in pair)


@check
def check_distribute_data_input_jax_signature():
    from keras.src.backend import distribution_lib as backend_dlib

    mesh = mesh24()
    layout = kd.TensorLayout(("batch", None), mesh)
    host = np.arange(32, dtype="float32").reshape(16, 2)
    x = backend_dlib.distribute_data_input(host, layout, "batch")
    assert spec(x) == (("batch",), ())
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(x), host)
    x = backend_dlib.distribute_data_input(host, layout.backend_layout, batch_dim_name="batch")
    assert spec(x) == (("batch",), ())


@check
def check_initialize_validates_job_addresses():
    try:
        kd.initialize("10.0.0.1:1234,10.0.0.2:2345", num_processes=3, process_id=0)
    except ValueError as err:
        assert "has 2 jobs, but num_processes is 3" in str(err), err
    else:
        raise AssertionError("no error for 2 job addresses and num_processes=3")


@check
def check_variables_laid_out_and_sharded():
    distribution = mp_distribution()
    with distribution.scope():
        model = mlp()
    layouts = {v.path: spec(v) for v in model.weights}
    assert layouts == {
        "d1/kernel": ((), ("model",)), "d1/bias": (("model",),),
        "d2/kernel": (("model",), ()), "d2/bias": ((),),
    }, layouts
    kernel = model.get_layer("d1").kernel
    assert tuple(ti.local_block(kernel.value, 1).shape) == (8, 4)  # physically sharded
    assert kernel.value.requires_grad
    # One host draw: the global kernel is not 8 different random blocks.
    full = kernel.numpy()
    assert full.shape == (8, 16)
    assert len({full[:, i * 4:(i + 1) * 4].tobytes() for i in range(4)}) == 4
    assert all(w.shape == tuple(v.shape) for w, v in zip(model.get_weights(), model.weights))


@check
def check_assign_keeps_layout_outside_scope():
    distribution = mp_distribution()
    with distribution.scope():
        model = mlp()
    kernel = model.get_layer("d1").kernel
    param = kernel.value
    new = np.arange(128, dtype="float32").reshape(8, 16)
    kernel.assign(new)  # outside the scope, from numpy
    assert kernel.value is param
    assert spec(kernel) == ((), ("model",))
    np.testing.assert_array_equal(kernel.numpy(), new)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(kernel), new)
    kernel.assign_add(np.ones((8, 16), "float32"))
    np.testing.assert_array_equal(kernel.numpy(), new + 1)
    model.set_weights([np.zeros(w.shape, "float32") for w in model.get_weights()])
    assert spec(kernel) == ((), ("model",)) and not kernel.numpy().any()


@check
def check_fit_keeps_layouts_and_optimizer_slots():
    distribution = mp_distribution()
    x, y = data()
    with distribution.scope():
        model = mlp()
        before = model.get_layer("d1").kernel.numpy()
        model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    assert not np.allclose(before, model.get_layer("d1").kernel.numpy())
    assert spec(model.get_layer("d1").kernel) == ((), ("model",))
    assert spec(model.get_layer("d2").kernel) == (("model",), ())
    slots = {v.path.split("/")[-1]: spec(v) for v in model.optimizer.variables if len(v.shape)}
    assert slots["d1_kernel_momentum"] == ((), ("model",)), slots
    assert slots["d2_kernel_velocity"] == (("model",), ()), slots
    # Another fit outside the scope keeps them too.
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    assert spec(model.get_layer("d1").kernel) == ((), ("model",))


@check
def check_load_weights_keeps_layout():
    distribution = mp_distribution()
    with distribution.scope():
        model = mlp()
    values = [np.full(w.shape, i, "float32") for i, w in enumerate(model.get_weights())]
    model.set_weights(values)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.weights.h5")
        model.save_weights(path)
        with distribution.scope():
            other = mlp()
        other.load_weights(path)
    assert spec(other.get_layer("d1").kernel) == ((), ("model",))
    assert spec(other.get_layer("d2").kernel) == (("model",), ())
    for a, b in zip(values, other.get_weights()):
        np.testing.assert_array_equal(a, b)


def weights_move_between_meshes(saved_on, loaded_on):
    """ModelParallel weights trained and saved (``save_weights``) on a mesh of
    shape ``saved_on`` load onto a model on a mesh of shape ``loaded_on``:
    the same values (exactly), each kernel in the new mesh's layout, and the
    same predictions up to float32 summation order: ``d2`` is row-parallel,
    so its 16-term contraction is summed as 2 partial sums on one mesh and 4
    (or 8) on the other; outputs are O(1), float32's epsilon is 1.2e-7, and a
    reordered 16-term sum moves by a few ulps (measured: 2.4e-7 at most)."""
    def distribution_on(shape):
        devices = kd.list_devices()
        layout_map = kd.LayoutMap(kd.DeviceMesh(shape, ("batch", "model"), devices))
        layout_map["d1/kernel"] = (None, "model")
        layout_map["d1/bias"] = ("model",)
        layout_map["d2/kernel"] = ("model", None)
        return kd.ModelParallel(layout_map=layout_map, batch_dim_name="batch")

    x, y = data()
    with distribution_on(saved_on).scope():
        model = mlp()
        model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
        predicted = model.predict(x, batch_size=16, verbose=0)
    values = model.get_weights()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.weights.h5")
        model.save_weights(path)
        with distribution_on(loaded_on).scope():
            other = mlp()
            other.load_weights(path)
            predicted_after = other.predict(x, batch_size=16, verbose=0)
    kernel = other.get_layer("d1").kernel
    assert spec(kernel) == ((), ("model",))
    assert ti.describe(kernel.value).mesh_shape == loaded_on
    assert spec(other.get_layer("d2").kernel) == (("model",), ())
    for a, b in zip(values, other.get_weights()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(predicted_after, predicted, rtol=0, atol=1e-6)


@check
def check_weights_saved_on_one_mesh_load_onto_another():
    """(2, 4) -> (1, 8) on the 8 simulated devices."""
    weights_move_between_meshes((2, 4), (1, 8))


def check_weights_saved_on_2x2_load_onto_1x4():
    """The issue's own case, (2, 2) -> (1, 4): on 4 simulated devices (a mesh
    over a subset of the 8 cannot be distributed on), run by ``main`` in a
    ``simulate(4)`` block of its own."""
    assert kd.list_devices() == [f"cpu:{i}" for i in range(4)], kd.list_devices()
    weights_move_between_meshes((2, 2), (1, 4))


@check
def check_layer_output_layout():
    mesh = mesh24()
    layout_map = kd.LayoutMap(mesh)
    layout_map[".*dense.*output"] = (None, "model")
    distribution = kd.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
    with distribution.scope():
        inputs = keras.Input((8,))
        outputs = keras.layers.Dense(16, name="my_dense")(inputs)
        model = keras.Model(inputs, outputs)
        x = kd.distribute_tensor(np.ones((8, 8), "float32"), kd.TensorLayout(("batch", None), mesh))
        y = model(x)
    assert spec(y) == ((), ("model",)), spec(y)


@check
def check_evaluate_reduces_across_replicas():
    distribution = kd.DataParallel(devices=kd.list_devices())
    x, y = data()
    with distribution.scope():
        model = mlp({"metrics": ["mae"]})
        result = model.evaluate(x, y, batch_size=16, verbose=0, return_dict=True)
        prediction = model.predict(x, batch_size=16, verbose=0)
    assert prediction.shape == (32, 4), prediction.shape
    np.testing.assert_allclose(result["loss"], np.mean((prediction - y) ** 2), rtol=1e-5)
    np.testing.assert_allclose(result["mae"], np.mean(np.abs(prediction - y)), rtol=1e-5)


@check
def check_on_batch_methods():
    distribution = kd.DataParallel(devices=kd.list_devices())
    x, y = data(16)
    with distribution.scope():
        model = mlp()
        loss = model.train_on_batch(x, y)
        test_loss = model.test_on_batch(x, y)
        prediction = model.predict_on_batch(x)
    assert isinstance(prediction, np.ndarray) and prediction.shape == (16, 4)
    assert np.isfinite(loss) and np.isfinite(test_loss)
    np.testing.assert_allclose(test_loss, np.mean((prediction - y) ** 2), rtol=1e-5)


@check
def check_data_iterator_distributes_batches():
    from keras.src.backend.torch import trainer as torch_trainer

    distribution = kd.DataParallel(devices=kd.list_devices())
    x, y = data(32)
    with distribution.scope():
        iterator = torch_trainer.TorchEpochIterator(x=x, y=y, batch_size=16)
        batches = [b[0] for _, _, b in iterator]
    assert len(batches) == 2
    bx, by = batches[0][:2]
    assert spec(bx) == (("batch",), ()) and spec(by) == (("batch",), ())
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(bx), x[:16])


@check
def check_jit_compile_over_simulated_ranks_runs_eagerly_and_says_so():
    """Over simulated ranks ``jit_compile=True`` cannot compile (AOTAutograd
    on ``LocalTensorMode``): the steps run eagerly -- dynamo compiles no
    graph -- with parity's one warning, and give eager's loss. Compiled
    values are checked against eager and JAX on real ranks, where the steps
    do compile (``tests/test_keras_jit_compile.py``)."""
    from torch._dynamo.utils import counters

    distribution = mp_distribution()
    x, y = data()
    results = []
    for jit in (False, True):
        keras.utils.set_random_seed(0)
        graphs_before, warned_before = counters["stats"]["unique_graphs"], _jit_warned_before()
        with distribution.scope(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = mlp({"jit_compile": jit})
            model.set_weights([np.full(w.shape, 0.1, "float32") for w in model.get_weights()])
            history = model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
        assert counters["stats"]["unique_graphs"] == graphs_before, "dynamo compiled a graph"
        said = [w for w in caught if "jit_compile=True runs the steps eagerly" in str(w.message)]
        assert len(said) == (1 if jit and not warned_before else 0), [str(w.message) for w in caught]
        results.append(history.history["loss"][-1])
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)


@check
def check_steps_run_where_inductor_buckets_all_reduces():
    """Keras's train step runs under ``jax_semantics()``, where parity turns
    inductor's ``bucket_all_reduces_fx`` on for the thread: a step that
    inductor compiles (``jit_compile=True`` on real ranks) launches one
    all-reduce per group and dtype for its gradients
    (``collectives/compiled_buckets.py``; the counts on gloo ranks are in
    ``tests/test_collective_counts.py``). Outside the step the option is
    torch's default."""
    import torch._inductor.config as inductor_config

    seen = []

    class Probe(keras.layers.Layer):
        def call(self, x):
            seen.append(inductor_config.bucket_all_reduces_fx)
            return x

    distribution = mp_distribution()
    x, y = data(16)
    with distribution.scope():
        inputs = keras.Input((8,))
        h = keras.layers.Dense(16, activation="relu", name="d1")(Probe()(inputs))
        model = keras.Model(inputs, keras.layers.Dense(4, name="d2")(h))
        model.compile(optimizer="adam", loss="mse")
        seen.clear()  # the functional model's build called the probe outside any step
        model.train_on_batch(x, y)
    assert seen and set(seen) == {"all"}, seen
    assert inductor_config.bucket_all_reduces_fx == "none"


def _jit_warned_before() -> bool:
    """parity warns once per thread; an earlier check may have had it."""
    from parity.torch_impl.keras import trainer

    return bool(getattr(trainer._state, "warned_jit", False))  # noqa: SLF001


@check
def check_transformer_megatron_layouts():
    mesh = mesh24()
    layout_map = kd.LayoutMap(mesh)
    layout_map["mha/(query|key|value)/kernel"] = (None, "model", None)
    layout_map["mha/attention_output/kernel"] = ("model", None, None)
    distribution = kd.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
    with distribution.scope():
        inputs = keras.Input((4, 8))
        outputs = keras.layers.MultiHeadAttention(4, 2, name="mha")(inputs, inputs)
        model = keras.Model(inputs, outputs)
        model.compile(optimizer="sgd", loss="mse")
        x = np.random.default_rng(0).normal(size=(16, 4, 8)).astype("float32")
        model.fit(x, x, batch_size=16, verbose=0)
    mha = model.get_layer("mha")
    assert spec(mha._query_dense.kernel) == ((), ("model",), ())
    assert spec(mha._output_dense.kernel) == (("model",), (), ())


@check
def check_no_distribution_still_plain():
    from torch.distributed.tensor import DTensor

    x, y = data()
    model = mlp()
    model.fit(x, y, batch_size=16, verbose=0)
    assert not isinstance(model.get_layer("d1").kernel.value, DTensor)
    assert model.predict(x, verbose=0).shape == (32, 4)


@check
def check_one_mesh_axis_on_two_dims_raises():
    """A layout naming one mesh axis for two dims is an error, as on JAX
    (``DuplicateSpecError``); Keras's own torch backend silently keeps the
    last dim."""
    layout = kd.TensorLayout(("model", "model"), mesh24())
    try:
        kd.distribute_tensor(np.zeros((8, 8), "float32"), layout)
    except parity.LayoutError as err:
        assert "model" in str(err), err
    else:
        raise AssertionError("a mesh axis on two dims was accepted")


@check
def check_replicated_variable_is_a_dtensor():
    """A variable with a fully replicated layout is a replicated DTensor on
    the mesh (Keras's own torch backend keeps a plain Parameter)."""
    from torch.distributed.tensor import DTensor

    with kd.DataParallel(devices=kd.list_devices()).scope():
        v = keras.Variable(np.ones((4, 2), "float32"))
    assert isinstance(v.value, DTensor) and spec(v) == ((), ())


@check
def check_plain_tensor_meets_a_variable_first():
    """``plain * variable`` and ``torch.mul(plain, variable)`` reach the
    variable's ``__torch_function__``, not its ``__rmul__``: the plain tensor
    counts as replicated there too (JAX's ``array * variable``), inside and
    outside a layer call. keras-hub's ``GptOssLayerNormalization`` computes
    ``x * self.scale`` on a plain tensor when Keras infers its decoder's
    output shape (issue 27); it raised DTensor's mixed-tensor error."""
    import torch

    class Scale(keras.layers.Layer):  # no compute_output_shape: Keras calls it on plain tensors
        def build(self, shape):
            self.scale = self.add_weight(name="scale", shape=(shape[-1],), initializer="ones")

        def call(self, x):
            return keras.ops.cast(x, "float32") * self.scale

    layout_map = kd.LayoutMap(mesh24())
    layout_map["scale/scale"] = ("model",)
    with kd.ModelParallel(layout_map=layout_map, batch_dim_name="batch").scope():
        inputs = keras.Input((8,))
        model = keras.Model(inputs, Scale(name="scale")(inputs))
        v = model.get_layer("scale").scale
        v.assign(np.arange(8, dtype="float32"))
        assert spec(v) == (("model",),), spec(v)
        x = np.linspace(0, 1, 16, dtype="float32").reshape(2, 8)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(model(x)), x * np.arange(8))
    plain = torch.arange(8, dtype=torch.float32)
    for got in (plain * v, torch.mul(plain, v), v * plain):  # outside any scope or layer call
        np.testing.assert_array_equal(ti.to_numpy(got), np.arange(8) ** 2)


@check
def check_model_code_between_layer_calls_runs_as_jax_in_the_scope():
    """A model's own code between layer calls, in a distribution's scope:
    keras-hub's ``Gemma4AssistantCausalLM.call_with_cache`` takes rows of the
    vocabulary-sharded token embedding (``ops.take``), reshapes them to
    (batch, seq, tokens, features), multiplies by the hidden states and fills
    a plain ``ops.ones`` with their minimum (issue 27). DTensor's own lookup
    left a masked partial sum the reshape broke ("IndexError: The shape of
    the mask ..."), and ``plain * DTensor`` raised its mixed-tensor error;
    on JAX both are plain ops, and here the numpy values."""
    rng = np.random.default_rng(0)
    table = rng.normal(size=(128, 32)).astype("float32")
    ids = rng.integers(0, 128, size=(128,)).astype("int32")
    hidden = rng.normal(size=(2, 4, 1, 32)).astype("float32")
    layout_map = kd.LayoutMap(mesh24())
    layout_map["embed/embeddings"] = ("model", "batch")  # keras-hub's token embedding
    with kd.ModelParallel(layout_map=layout_map, batch_dim_name="batch").scope():
        inputs = keras.Input((4,), dtype="int32")
        model = keras.Model(inputs, keras.layers.Embedding(128, 32, name="embed")(inputs))
        model.get_layer("embed").embeddings.assign(table)
        # ids and hidden states as layers gave them (replicated DTensors)
        mesh = layout_map.device_mesh
        top_k = kd.distribute_tensor(ids, kd.TensorLayout((None,), mesh))
        states = kd.distribute_tensor(hidden, kd.TensorLayout((None,) * 4, mesh))
        rows = keras.ops.take(model.get_layer("embed").embeddings, top_k, axis=0)
        rows = keras.ops.reshape(rows, (2, 4, 16, 32))
        logits = keras.ops.matmul(states, keras.ops.transpose(rows, (0, 1, 3, 2)))
        fill = keras.ops.ones((8, 16)) * keras.ops.min(logits)
    want = hidden @ table[ids].reshape(2, 4, 16, 32).transpose(0, 1, 3, 2)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(logits), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(fill), np.full((8, 16), want.min()),
                               rtol=1e-6)


@check
def check_data_input_without_a_layout_is_returned_as_it_is():
    """Keras's torch trainer (keras-nightly's ``_distribute_data``) calls
    ``distribute_data_input(d, None)`` for data with no layout (a missing
    sample weight in ``train_on_batch``): the batch comes back unchanged,
    as Keras's own backends return it."""
    from parity.torch_impl.keras import distribution_lib as backend_dist

    assert backend_dist.distribute_data_input(None, None) is None
    batch = np.ones((4, 2), np.float32)
    assert backend_dist.distribute_data_input(batch, None) is batch


@check
def check_dropout_training_matches_one_device():
    """A model with (unseeded) Dropout trained 3 steps under ModelParallel
    on the (2, 4) mesh ends with the weights of the same model trained on
    plain tensors after the same seed (issue 25): the masks are the
    unsharded program's."""
    from parity.torch_impl.runtime.torch_compat import maybe_disable_local_tensor_mode

    def build():
        inputs = keras.Input((8,))
        h = keras.layers.Dense(16, activation="relu", name="d1")(inputs)
        h = keras.layers.Dropout(0.5, name="drop")(h)
        model = keras.Model(inputs, keras.layers.Dense(4, name="d2")(h))
        model.compile(optimizer="sgd", loss="mse")
        return model

    x, y = data()
    with maybe_disable_local_tensor_mode():  # one plain process
        keras.utils.set_random_seed(1)
        ref = build()
        for _ in range(3):
            ref.train_on_batch(x, y)
        expected = [v.numpy() for v in ref.weights]
    with mp_distribution().scope():
        keras.utils.set_random_seed(1)
        model = build()
        for _ in range(3):
            model.train_on_batch(x, y)
        got = [keras.ops.convert_to_numpy(v.value) for v in model.weights]
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def main(names):
    selected = [c for c in CHECKS if not names or c.__name__ in names]
    results = []
    if not names or "check_install_after_variables_raises" in names:
        results.append(run_check(check_install_after_variables_raises))
    else:
        ti.install_keras()
    with ti.simulate(8):
        for fn in selected:
            results.append(run_check(fn))
    if not names or "check_weights_saved_on_2x2_load_onto_1x4" in names:
        with ti.simulate(4):
            results.append(run_check(check_weights_saved_on_2x2_load_onto_1x4))
    results.append(run_check(check_no_distribution_still_plain))  # outside simulate too
    return results



if __name__ == "__main__":
    from keras_under_test import assert_keras_under_test

    assert_keras_under_test()
    main(sys.argv[1:])
