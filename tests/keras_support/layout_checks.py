"""Issue 27's ``parity.keras_layout`` checks on a model, in one process of
one Keras backend (``KERAS_BACKEND`` is read at import).

Two models: ``plain``, a small decoder made of Keras's own layers
(``Embedding``, ``GroupQueryAttention`` with 2 key/value heads, ``Dense``,
``LayerNormalization``: no keras-hub), and ``llama``, keras-hub's tiny
random Llama (``hub_families.FAMILIES["llama"]``). Both name their layers
as keras-hub does (``transformer_layer_0/feedforward_intermediate_dense``),
so one renamed key (``DEAD_KEY``, ``mlp_up``) matches nothing in either.

* ``CHECK <name> ok|FAIL`` lines (``--model plain``, unless
  ``--measure-only``): the derived map, the report of a renamed key, an
  abstract build that allocates nothing, typed errors.
* One ``LAYOUT_CHECK`` JSON line: the model trained 2 steps twice (two
  ``fit`` calls) under ``ModelParallel`` on a (2, 4) ``("batch", "model")``
  mesh of 8 simulated devices, with the derived map plus ``DEAD_KEY``: the
  losses, the ``UnmatchedLayoutKeyWarning`` messages, and on torch each
  rank's bytes of local storage beside ``report``'s bytes per device.

    KERAS_BACKEND=torch python tests/keras_support/layout_checks.py --model plain
    KERAS_BACKEND=torch PYTHONPATH=.keras-hub:. python tests/keras_support/layout_checks.py --model llama --measure-only

``tests/test_keras_layout_plain.py`` runs the plain model (default suite),
``tests/test_keras_layout.py`` the keras-hub one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import warnings

import numpy as np

DEAD_KEY = r"transformer_layer_\d+/mlp_up/kernel"  # the MLP's up layer, renamed away
LIVE_PATH = "transformer_layer_0/feedforward_intermediate_dense/kernel"
TINY = dict(vocabulary_size=64, num_layers=2, num_query_heads=8, num_key_value_heads=2,
            hidden_dim=32, intermediate_dim=64)
SEQ = 8


def plain_decoder(*, vocabulary_size, num_layers, num_query_heads, num_key_value_heads,
                  hidden_dim, intermediate_dim):
    """A causal decoder of Keras's own layers: token ids in, logits out.
    ``num_key_value_heads=None``: ``MultiHeadAttention`` instead of
    ``GroupQueryAttention`` (which torch cannot trace on its meta device:
    Keras's ``ops.repeat`` of the key/value heads fails there, so Keras
    traces the layer eagerly on CPU with each weight's initial value)."""
    import keras

    class TransformerLayer(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            if num_key_value_heads is None:
                self.self_attention = keras.layers.MultiHeadAttention(
                    num_query_heads, hidden_dim // num_query_heads, use_bias=False,
                    name="self_attention")
            else:
                self.self_attention = keras.layers.GroupQueryAttention(
                    head_dim=hidden_dim // num_query_heads, num_query_heads=num_query_heads,
                    num_key_value_heads=num_key_value_heads, use_bias=False,
                    name="self_attention")
            self.attention_norm = keras.layers.LayerNormalization(name="attention_norm")
            self.up = keras.layers.Dense(intermediate_dim, activation="gelu", use_bias=False,
                                         name="feedforward_intermediate_dense")
            self.down = keras.layers.Dense(hidden_dim, use_bias=False,
                                           name="feedforward_output_dense")
            self.feedforward_norm = keras.layers.LayerNormalization(name="feedforward_norm")

        def call(self, x):
            h = self.attention_norm(x)
            x = x + self.self_attention(h, h, use_causal_mask=True)
            return x + self.down(self.up(self.feedforward_norm(x)))

    # A fixed length: Keras traces a layer twice for a None dim.
    token_ids = keras.Input((SEQ,), dtype="int32", name="token_ids")
    x = keras.layers.Embedding(vocabulary_size, hidden_dim, name="token_embedding")(token_ids)
    for i in range(num_layers):
        x = TransformerLayer(name=f"transformer_layer_{i}")(x)
    x = keras.layers.LayerNormalization(name="final_norm")(x)
    logits = keras.layers.Dense(vocabulary_size, use_bias=False, name="lm_head")(x)
    return keras.Model(token_ids, logits, name="plain_decoder")


def mesh_of(shape, devices=None):
    """A ``("batch", "model")`` DeviceMesh of ``shape`` (device names made
    up when none are given: deriving a map needs none)."""
    import keras

    if devices is None:
        devices = np.array([f"cpu:{i}" for i in range(int(np.prod(shape)))])
    return keras.distribution.DeviceMesh(shape, ("batch", "model"),
                                         np.asarray(devices).reshape(shape))


def assert_report_flags_a_renamed_key(model, mesh):
    """keras-hub#2806 on ``model``: a hand-written map whose MLP key names
    a renamed layer (``DEAD_KEY``). The report lists the key as matching
    nothing, the nearest paths name the live layer, the live layer's
    kernel is listed as large and replicated, and the key that does match
    (the token embedding) is split 4 ways."""
    import keras

    from parity import keras_layout

    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map["token_embedding/embeddings"] = ("model", None)
    layout_map[DEAD_KEY] = (None, "model")
    live = next(v for v in model.weights if v.path == LIVE_PATH)
    rep = keras_layout.report(model, layout_map, large_bytes=4 * int(np.prod(live.shape)))
    assert rep.unmatched_keys == (DEAD_KEY,), rep.unmatched_keys
    near = keras_layout.nearest_paths(DEAD_KEY, [v.path for v in rep.variables],
                                      ranks={v.path: len(v.shape) for v in rep.variables},
                                      rank=2)
    assert LIVE_PATH in near, near
    assert LIVE_PATH in rep.large_replicated, rep.large_replicated
    embedding = next(v for v in rep.variables if v.path == "token_embedding/embeddings")
    assert embedding.key == "token_embedding/embeddings"
    assert embedding.device_bytes == embedding.bytes // 4
    assert rep.device_bytes == rep.total_bytes - embedding.bytes + embedding.device_bytes
    assert rep.table().row_count == len(model.weights)


def run_on_both_backends(model_name, env_of, *args):
    """Run this script for ``model_name`` with ``KERAS_BACKEND=jax``, then
    ``torch`` (never both at once: XLA:CPU aborts a JAX collective whose
    device threads a busy neighbour starves for 40 s, CI stop 28).
    ``env_of(backend)`` gives each child's environment. Returns
    ``{backend: (stdout, LAYOUT_CHECK result)}``."""
    import subprocess

    out = {}
    for backend in ("jax", "torch"):
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--model",
                                 model_name, *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env_of(backend),
                                cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                                    os.path.abspath(__file__)))))
        try:
            stdout, stderr = proc.communicate(timeout=1500)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, (stdout[-2000:] + stderr[-4000:])
        line = next(x for x in stdout.splitlines() if x.startswith("LAYOUT_CHECK "))
        out[backend] = (stdout, json.loads(line[len("LAYOUT_CHECK "):]))
    return out


def assert_storage_and_warning(jax, torch):
    """The measured run's facts: on torch every rank's local blocks add up
    to the report's bytes per device, variable by variable; the dead key
    warned once over two fits, naming the key and the live layer; JAX's
    Keras stays silent; both backends give the same losses."""
    assert torch["rank_bytes"] == [torch["report_device_bytes"]] * 8, torch["rank_bytes"]
    assert torch["report_device_bytes"] < torch["total_bytes"] / 3
    assert torch["per_variable_mismatches"] == []
    assert torch["unmatched_keys"] == jax["unmatched_keys"] == [DEAD_KEY]
    assert len(torch["warnings"]) == 1, torch["warnings"]
    message = torch["warnings"][0]
    assert repr(DEAD_KEY) in message, message
    assert LIVE_PATH in message, message
    assert jax["warnings"] == []
    np.testing.assert_allclose(torch["losses"], jax["losses"], rtol=1e-5)
    assert len(jax["losses"]) == 2


# --- checks on the plain model (CHECK lines) ----------------------------------

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


@check
def check_derived_map_shards_every_weight_matrix():
    """On (2, 4) and (1, 8): every weight matrix has a dim on ``model``,
    every layout divides its shape, norms stay replicated, and the 2
    key/value heads (which divide neither 4 nor 8) give way to another dim,
    with a note."""
    from parity import keras_layout

    model = keras_layout.abstract_model(plain_decoder, **TINY)
    for shape in ((2, 4), (1, 8)):
        layout_map = keras_layout.layout_map_for(model, mesh_of(shape))
        rep = keras_layout.report(model, layout_map, large_bytes=0)
        sizes = dict(zip(("batch", "model"), shape))
        assert rep.unmatched_keys == ()
        for v in rep.variables:
            assert v.divisible, (v.path, v.shape, v.axes)
            assert ("model" in v.axes) == (len(v.shape) >= 2), (v.path, v.axes)
            for n, a in zip(v.shape, v.axes):
                assert a is None or n % sizes[a] == 0, (v.path, v.shape, v.axes)
        # One key per layer kind: the map does not grow with depth.
        assert len(layout_map) == 8, list(layout_map)
        for kind in ("key", "value"):
            rule = layout_map.parity_derivation.rule(
                f"transformer_layer_1/self_attention/{kind}/kernel")
            assert rule.shape == (32, 2, 4) and rule.axes[1] is None, rule
            assert "not divisible by 'model'" in rule.note, rule
        # The query kernel: its 8 heads on model, hidden on batch.
        rule = layout_map.parity_derivation.rule("transformer_layer_0/self_attention/query/kernel")
        assert rule.axes == ("batch", "model", None), rule
        assert rep.device_bytes < rep.total_bytes / 3


@check
def check_report_names_a_key_that_matches_nothing_after_a_rename():
    from parity import keras_layout

    assert_report_flags_a_renamed_key(keras_layout.abstract_model(plain_decoder, **TINY),
                                      mesh_of((2, 4)))


@check
def check_abstract_model_allocates_no_weight():
    """A 4-layer decoder of Llama-3-8B's widths (6.6 GB of float32) builds
    without its weights: no variable holds a value, the process's peak
    memory grows by less than 1 GB, and the report sizes every byte.
    Multi-head attention (``plain_decoder``'s docstring says why)."""
    from parity import keras_layout

    config = dict(vocabulary_size=128256, num_layers=4, num_query_heads=32,
                  num_key_value_heads=None, hidden_dim=4096, intermediate_dim=14336)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    model = keras_layout.abstract_model(plain_decoder, **config)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak
    assert all(v._value is None for v in model.weights)
    total = sum(int(np.prod(v.shape)) for v in model.weights) * 4
    assert total > 6.5e9, total
    assert grown < 1 << 20, f"peak memory grew {grown} KiB building {total} bytes of weights"
    layout_map = keras_layout.layout_map_for(model, mesh_of((2, 4)))
    rep = keras_layout.report(model, layout_map)
    assert rep.total_bytes == total
    # Everything but the norms is split 8 ways.
    norms = sum(v.bytes for v in rep.variables if v.replicated)
    assert norms == (2 * 4 + 1) * 2 * 4096 * 4, norms
    assert rep.device_bytes == (total - norms) // 8 + norms
    assert rep.large_replicated == ()


@check
def check_bad_input_is_a_typed_error_naming_the_fix():
    import pytest

    from parity import LayoutError, keras_layout

    model = keras_layout.abstract_model(plain_decoder, **TINY)
    mesh = mesh_of((2, 4))
    with pytest.raises(LayoutError, match=r"model_axis='tensor' is not an axis") as info:
        keras_layout.layout_map_for(model, mesh, model_axis="tensor")
    assert (info.value.what, info.value.value) == ("model_axis", "tensor")
    with pytest.raises(LayoutError, match=r"convention='zero3'") as info:
        keras_layout.layout_map_for(model, mesh, convention="zero3")
    assert (info.value.what, info.value.value) == ("convention", "zero3")
    with pytest.raises(LayoutError, match="must be a keras.distribution.DeviceMesh") as info:
        keras_layout.layout_map_for(model, (2, 4))
    assert (info.value.what, info.value.value) == ("mesh", (2, 4))
    with pytest.raises(TypeError, match="must be a model class"):
        keras_layout.abstract_model("LlamaBackbone")
    # Data parallel off: the model axis only.
    only_model = keras_layout.derive(model, mesh, batch_axis=None)
    assert all("batch" not in r.axes for r in only_model.rules)
    assert any("model" in r.axes for r in only_model.rules)


# --- the measured run (LAYOUT_CHECK line) -------------------------------------


def build_task(model_name):
    """``(abstract model, task builder, x, y)`` for ``model_name``: the task
    builder makes the compiled, trainable model (under the caller's
    distribution scope)."""
    from parity import keras_layout

    rng = np.random.default_rng(0)
    token_ids = rng.integers(1, 64, size=(16, SEQ)).astype("int32")
    y = rng.integers(0, 64, size=(16, SEQ)).astype("int32")
    if model_name == "plain":
        # Multi-head attention: built under the distribution, Keras's
        # GroupQueryAttention would be traced eagerly on 8 simulated ranks
        # (plain_decoder's docstring), minutes on 2 cores.
        config = dict(TINY, num_key_value_heads=None)

        def task():
            return plain_decoder(**config)

        return keras_layout.abstract_model(plain_decoder, **config), task, token_ids, y
    import keras_hub
    from hub_families import FAMILIES

    task_name, backbone_name, kwargs = FAMILIES[model_name]
    backbone_cls = getattr(keras_hub.models, backbone_name)

    def task():
        return getattr(keras_hub.models, task_name)(backbone_cls(**kwargs), preprocessor=None)

    x = {"token_ids": token_ids, "padding_mask": np.ones((16, SEQ), "int32")}
    return keras_layout.abstract_model(backbone_cls, **kwargs), task, x, y


def measure(model_name, backend):
    import keras

    from parity import keras_layout

    mesh = mesh_of((2, 4), keras.distribution.list_devices())
    abstract, make_task, x, y = build_task(model_name)
    layout_map = keras_layout.layout_map_for(abstract, mesh)
    layout_map[DEAD_KEY] = (None, "model")
    distribution = keras.distribution.ModelParallel(layout_map=layout_map,
                                                    batch_dim_name="batch")
    keras.utils.set_random_seed(0)
    with distribution.scope():
        task = make_task()
        task.compile(optimizer=keras.optimizers.Adam(1e-2),
                     loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        w = np.random.default_rng(1)
        task.set_weights([(w.normal(size=v.shape) * 0.1).astype(v.dtype)
                          for v in task.get_weights()])
        losses = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):
                history = task.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
                losses.extend(float(v) for v in history.history["loss"])
    found = [str(c.message) for c in caught
             if issubclass(c.category, keras_layout.UnmatchedLayoutKeyWarning)]
    rep = keras_layout.report(task, layout_map)
    result = {"backend": backend, "model": model_name, "losses": losses, "warnings": found,
              "report_device_bytes": rep.device_bytes, "total_bytes": rep.total_bytes,
              "unmatched_keys": list(rep.unmatched_keys)}
    if backend == "torch":
        from parity import torch_impl

        rank_bytes = [0] * 8
        mismatches = []
        for v, row in zip(task.weights, rep.variables):
            value = v.value
            value = getattr(value, "data", value)
            blocks = [torch_impl.local_block(value, d) for d in range(8)]
            sizes = [b.numel() * b.element_size() for b in blocks]
            rank_bytes = [a + b for a, b in zip(rank_bytes, sizes)]
            if set(sizes) != {row.device_bytes}:
                mismatches.append([v.path, sizes, row.device_bytes])
        result["rank_bytes"] = rank_bytes
        result["per_variable_mismatches"] = mismatches
    return result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="plain", help="plain, or a hub_families family (llama)")
    p.add_argument("--measure-only", action="store_true", help="no CHECK lines")
    args = p.parse_args()
    backend = os.environ.get("KERAS_BACKEND", "jax")
    if backend == "jax":
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + " --xla_force_host_platform_device_count=8")
    import keras  # noqa: F401

    from contextlib import nullcontext

    from check_runner import run_check

    scope = nullcontext()
    if backend == "torch":  # parity installed before any variable exists
        from parity import torch_impl

        torch_impl.install_keras()
        scope = torch_impl.simulate(8)
    start = time.perf_counter()
    if not args.measure_only:  # outside the simulated ranks: nothing here runs on them
        for fn in CHECKS:
            run_check(fn)
    checked = time.perf_counter()
    with scope:
        result = measure(args.model, backend)
    result["seconds"] = {"checks": checked - start, "measure": time.perf_counter() - checked}
    sys.stdout.write("LAYOUT_CHECK " + json.dumps(result) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from keras_under_test import assert_keras_under_test

    assert_keras_under_test()
    main()
