"""``parity.keras_layout`` (issue 27): layout maps derived from keras-hub
models, and the report of what a map does.

Derivation only (no training, seconds): every decoder-LLM family of
keras-hub 0.32.0 (``keras_support/hub_families.py``), built abstractly (no
weights), on (2, 4) and (1, 8) ``("batch", "model")`` meshes; the five
shipped ``get_layout_map``s; the report on a renamed layer. The torch
measurements (local storage, the shim's warning) run in a subprocess
(``keras_support/layout_torch_checks.py``). Marked ``keras_hub`` (needs the
``.keras-hub`` overlay): ``bash scripts/keras_hub.sh -k layout``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from subprocess_env import child_env

pytestmark = [
    pytest.mark.keras_hub,
    pytest.mark.skipif(
        any(importlib.util.find_spec(m) is None for m in ("keras_hub", "keras", "jax", "torch")),
        reason="needs keras-hub (bash scripts/keras_hub.sh installs it)",
    ),
]
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "keras_support"))
from hub_families import DERIVE_ONLY, FAMILIES, SHIPPED, backbone_builder  # noqa: E402

# Every family's backbone: the trained ones and those only derived.
BACKBONES = {name: (backbone, kwargs) for name, (_, backbone, kwargs) in FAMILIES.items()} | {
    name: (backbone, kwargs) for name, (backbone, kwargs, _) in DERIVE_ONLY.items()}

MESHES = {"2x4": (2, 4), "1x8": (1, 8)}


@pytest.fixture(scope="module")
def keras_hub():
    # The derivation needs no device: any Keras backend (jax unless the
    # session chose one), fake device names.
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras_hub

    return keras_hub


def mesh_of(text):
    import keras

    shape = MESHES[text]
    return keras.distribution.DeviceMesh(
        shape, ("batch", "model"), np.array([f"cpu:{i}" for i in range(8)]).reshape(shape))


def abstract(keras_hub, backbone, kwargs):
    from parity import keras_layout

    return keras_layout.abstract_model(backbone_builder(backbone), **kwargs)


def axes_of(layout_map, path):
    layout = layout_map[path]
    return None if layout is None else tuple(layout.axes)


@pytest.mark.parametrize("mesh", MESHES)
@pytest.mark.parametrize("family", BACKBONES)
def test_derived_map_shards_every_weight_of_every_family_without_indivisible_dims(
        keras_hub, family, mesh):
    from parity import keras_layout

    backbone, kwargs = BACKBONES[family]
    model = abstract(keras_hub, backbone, kwargs)
    layout_map = keras_layout.layout_map_for(model, mesh_of(mesh))
    rep = keras_layout.report(model, layout_map, large_bytes=0)
    sizes = dict(zip(("batch", "model"), MESHES[mesh]))
    derivation = layout_map.parity_derivation
    for v in rep.variables:
        assert v.divisible, (v.path, v.shape, v.axes)
        rule = derivation.rule(v.path)
        assert v.axes == (rule.axes if rule.sharded else (None,) * len(v.shape)), v.path
        if rule.role != "vector":  # every weight matrix has a dim on the model axis,
            # unless none divides it (Gemma3n's (2, 2) AltUp coefficients): the rule says so
            divisible = any(n % sizes["model"] == 0 for n in v.shape)
            assert ("model" in v.axes) == divisible, (v.path, v.shape, rule)
            assert divisible or "no dim divisible by 'model'" in rule.note, rule
        for n, a in zip(v.shape, v.axes):
            assert a is None or n % sizes[a] == 0
    assert rep.unmatched_keys == ()
    # One key per layer kind, not per layer: the map does not grow with depth.
    assert len(layout_map) < len(rep.variables)
    assert rep.device_bytes == sum(v.device_bytes for v in rep.variables) < rep.total_bytes
    # Only norms, biases, scalars and one-value gates stay replicated.
    replicated = [v for v in rep.variables if v.replicated]
    assert all(len(v.shape) <= 1 or derivation.rule(v.path).role == "vector" for v in replicated)
    # Grouped-query key/value heads (2) divide neither model axis: another
    # dim of the kernel takes it, and the rule says so.
    for r in derivation.rules:
        if r.path.endswith("key/kernel") and len(r.shape) == 3 and 2 in r.shape:
            assert "not divisible" in r.note and r.axes[r.shape.index(2)] is None, r


@pytest.mark.parametrize("mesh", MESHES)
@pytest.mark.parametrize("family", SHIPPED)
def test_derived_map_equals_the_shipped_get_layout_map(keras_hub, family, mesh):
    """With ``convention="keras_hub"`` the derived map gives every variable
    a shipped map lays out the shipped layout; it also shards what the
    shipped maps leave replicated (the untied output head and the
    mixture-of-experts weights, keras-hub#2810). With the default
    Megatron convention only the Llama-style q/k/v kernels differ: heads,
    not hidden, on the model axis (the swap keras-hub#2815 describes)."""
    from hub_driver import MODELS

    from parity import keras_layout

    _, backbone, kwargs = MODELS[family]
    model = abstract(keras_hub, backbone, kwargs)
    mesh_ = mesh_of(mesh)
    shipped = getattr(keras_hub.models, backbone).get_layout_map(mesh_)
    ours = keras_layout.layout_map_for(model, mesh_, convention="keras_hub")
    megatron = keras_layout.layout_map_for(model, mesh_)
    laid_out = extra = 0
    for v in model.weights:
        want, got = axes_of(shipped, v.path), axes_of(ours, v.path)
        if want is not None:
            laid_out += 1
            assert got == want, (v.path, v.shape, got, want)
            meg = axes_of(megatron, v.path)
            if meg != want:
                name = v.path.split("/")[-2]
                assert family != "gemma" and name in ("query", "key", "value"), v.path
                assert meg == (want[1], want[0], want[2]), (v.path, meg, want)
        elif got is not None:
            extra += 1
            assert v.path.endswith("reverse_embeddings") or "/experts/" in v.path, v.path
    assert laid_out >= 4 * 2 + 1


def test_abstract_model_allocates_no_weight_and_reports_an_8b_llama(keras_hub):
    """Llama-3-8B's shapes, built without its 32 GB of float32 weights."""
    from parity import keras_layout

    model = abstract(keras_hub, "LlamaBackbone", dict(
        vocabulary_size=128256, num_layers=32, num_query_heads=32, num_key_value_heads=8,
        hidden_dim=4096, intermediate_dim=14336))
    assert all(v._value is None for v in model.weights)
    layout_map = keras_layout.layout_map_for(model, mesh_of("2x4"))
    rep = keras_layout.report(model, layout_map)
    total = sum(math.prod(v.shape) for v in model.weights) * 4
    assert rep.total_bytes == total == 8030261248 * 4
    # Everything but the norms is split 8 ways.
    norms = sum(v.bytes for v in rep.variables if v.replicated)
    assert rep.device_bytes == (total - norms) // 8 + norms
    assert rep.large_replicated == ()
    assert len(layout_map) == 9


def test_report_names_a_key_that_matches_nothing_after_a_rename(keras_hub):
    """keras-hub#2806: the MLP layer renamed; its keys match nothing and
    its weights are silently replicated. The report says so."""
    import keras

    from parity import keras_layout

    _, backbone, kwargs = FAMILIES["llama"]
    model = abstract(keras_hub, backbone, kwargs)
    mesh_ = mesh_of("2x4")
    layout_map = keras.distribution.LayoutMap(mesh_)
    layout_map["token_embedding/embeddings"] = ("model", None)
    layout_map[r"transformer_layer_\d+/mlp_up/kernel"] = (None, "model")  # was feedforward_intermediate_dense
    rep = keras_layout.report(model, layout_map, large_bytes=4 * 32 * 64)
    assert rep.unmatched_keys == (r"transformer_layer_\d+/mlp_up/kernel",)
    near = keras_layout.nearest_paths(rep.unmatched_keys[0], [v.path for v in rep.variables],
                                      ranks={v.path: len(v.shape) for v in rep.variables},
                                      rank=2)
    assert "transformer_layer_0/feedforward_intermediate_dense/kernel" in near, near
    assert "transformer_layer_0/feedforward_intermediate_dense/kernel" in rep.large_replicated
    embedding = next(v for v in rep.variables if v.path == "token_embedding/embeddings")
    assert embedding.key == "token_embedding/embeddings"
    assert embedding.device_bytes == embedding.bytes // 4
    table = rep.table()
    assert table.row_count == len(model.weights)


def test_bad_input_is_a_typed_error_naming_the_fix(keras_hub):
    from parity import LayoutError, keras_layout

    model = abstract(keras_hub, "LlamaBackbone", FAMILIES["llama"][2])
    with pytest.raises(LayoutError, match=r"model_axis='tensor' is not an axis") as info:
        keras_layout.layout_map_for(model, mesh_of("2x4"), model_axis="tensor")
    assert (info.value.what, info.value.value) == ("model_axis", "tensor")
    with pytest.raises(LayoutError, match=r"convention='zero3'") as info:
        keras_layout.layout_map_for(model, mesh_of("2x4"), convention="zero3")
    assert (info.value.what, info.value.value) == ("convention", "zero3")
    with pytest.raises(LayoutError, match="must be a keras.distribution.DeviceMesh") as info:
        keras_layout.layout_map_for(model, (2, 4))
    assert (info.value.what, info.value.value) == ("mesh", (2, 4))
    # Data parallel off: the model axis only.
    only_model = keras_layout.derive(model, mesh_of("2x4"), batch_axis=None)
    assert all("batch" not in r.axes for r in only_model.rules)


def test_import_parity_keras_layout_loads_no_framework():
    code = ("import parity.keras_layout, sys; "
            "print(any(m in sys.modules for m in ('keras', 'torch', 'jax')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=child_env(), cwd=ROOT)
    assert out.stdout.split() == ["False"]


@pytest.mark.timeout(1800)
def test_torch_local_storage_equals_the_report_and_a_dead_key_warns_once():
    """On torch + parity (8 simulated ranks): every rank's local blocks add
    up to the report's bytes per device; a key renamed away warns once
    (two fits), naming the key and the nearest paths; JAX's Keras stays
    silent."""
    script = ROOT / "tests" / "keras_support" / "layout_torch_checks.py"
    # One backend at a time: XLA:CPU aborts a JAX collective whose device
    # threads a busy neighbour starves for 40 s (CI stop 28).
    results = {}
    for backend in ("jax", "torch"):
        proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                env=child_env(KERAS_BACKEND=backend))
        try:
            out, err = proc.communicate(timeout=1500)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err[-4000:]
        line = next(x for x in out.splitlines() if x.startswith("LAYOUT_CHECK "))
        results[backend] = json.loads(line[len("LAYOUT_CHECK "):])
    torch = results["torch"]
    assert torch["rank_bytes"] == [torch["report_device_bytes"]] * 8
    assert torch["per_variable_mismatches"] == []
    assert len(torch["warnings"]) == 1, torch["warnings"]
    message = torch["warnings"][0]
    assert "transformer_layer_\\\\d+/mlp_up/kernel" in message or "mlp_up" in message
    assert "feedforward_intermediate_dense/kernel" in message
    assert results["jax"]["warnings"] == []
    assert results["jax"]["losses"] == pytest.approx(torch["losses"], rel=1e-5)


@pytest.mark.timeout(900)
def test_the_docs_example_runs(tmp_path):
    """docs/keras-hub.md's example, as written, on torch + parity."""
    text = (ROOT / "docs" / "keras-hub.md").read_text()
    block = text.split("## Example", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "example.py"
    script.write_text(block)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         env=child_env(KERAS_BACKEND="torch"), cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    assert "largest device" in out.stdout
