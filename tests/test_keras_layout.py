"""``parity.keras_layout`` (issue 27): layout maps derived from keras-hub
models, and the report of what a map does.

Derivation only (no training, seconds): every decoder-LLM family of
keras-hub 0.32.0 (``keras_support/hub_families.py``), built abstractly (no
weights), on (2, 4) and (1, 8) ``("batch", "model")`` meshes; the five
shipped ``get_layout_map``s; the report on a renamed layer; an abstract
Llama-3-8B. The torch measurements (local storage, the shim's warning)
run in a subprocess per backend (``keras_support/layout_checks.py``). The
docs example runs as written. Marked ``keras_hub`` (needs the
``.keras-hub`` overlay); CI runs this whole file (``.ci/run``:
``scripts/keras_hub.sh -k "(2x4 and not torchrun) or test_keras_layout"``).
What needs no keras-hub (typed errors, the import, the same checks on a
plain Keras model) is in the default suite: ``tests/test_keras_layout_plain.py``.
"""

from __future__ import annotations

import importlib.util
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
from hub_families import (  # noqa: E402
    DERIVE_ONLY,
    FAMILIES,
    LEFT_OUT,
    MODULES,
    SHIPPED,
    TASKS_LEFT_OUT,
    backbone_builder,
    derivation_model,
)
from layout_checks import (  # noqa: E402
    assert_report_flags_a_renamed_key,
    assert_storage_and_warning,
    run_on_both_backends,
)

# Every family: the trained ones and those only derived.
DERIVED = sorted(FAMILIES) + sorted(DERIVE_ONLY)

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
@pytest.mark.parametrize("family", DERIVED)
def test_derived_map_shards_every_weight_of_every_family_without_indivisible_dims(
        keras_hub, family, mesh):
    from parity import keras_layout

    model = derivation_model(family)  # the abstract backbone; Gemma4's assistant: its task
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
def test_gemma4_assistant_map_lays_out_its_own_dense_layers(keras_hub, mesh):
    """Gemma4AssistantCausalLM's three Dense layers, which its Gemma4
    backbone does not have, get the model axis: pre_projection (the
    target's embedding and hidden state, 128, to 32) row-parallel,
    post_projection (32 to the target's 64) and centroids (32 to 8
    clusters) column-parallel."""
    from parity import keras_layout

    model = derivation_model("gemma4_assistant")
    derivation = keras_layout.layout_map_for(model, mesh_of(mesh)).parity_derivation
    want = {"pre_projection/kernel": ((128, 32), "row", ("model", "batch")),
            "post_projection/kernel": ((32, 64), "column", ("batch", "model")),
            "centroids/kernel": ((32, 8), "column", ("batch", "model"))}
    for path, (shape, role, axes) in want.items():
        rule = derivation.rule(path)
        assert (rule.shape, rule.role, rule.axes, rule.note) == (shape, role, axes, ""), rule
    # Its vocabulary ordering (a float vector of token ids) stays whole.
    ordering = [r for r in derivation.rules if r.path.endswith("/token_ordering")]
    assert len(ordering) == 1 and not ordering[0].sharded, ordering


def test_every_keras_hub_model_directory_is_a_family_or_left_out_with_a_reason(keras_hub):
    """keras-hub's model directories are each a family (trained or derived
    only, ``hub_families.MODULES`` naming the directory where it differs)
    or in ``LEFT_OUT`` with a reason, and its language-model tasks each a
    family's task or in ``TASKS_LEFT_OUT``: a family added to keras-hub
    shows up here."""
    models = Path(keras_hub.__file__).parent / "src" / "models"
    directories = {p.name for p in models.iterdir() if p.is_dir() and p.name != "__pycache__"}
    covered = {MODULES.get(f, f) for f in DERIVED}
    assert covered <= directories, covered - directories
    assert set(LEFT_OUT) <= directories, set(LEFT_OUT) - directories
    assert not covered & set(LEFT_OUT), covered & set(LEFT_OUT)
    assert directories == covered | set(LEFT_OUT), directories - covered - set(LEFT_OUT)
    assert all(len(reason) > 20 for reason in {**LEFT_OUT, **TASKS_LEFT_OUT}.values())
    from keras_hub.src.models.audio_to_text import AudioToText

    m = keras_hub.models
    bases = (m.CausalLM, m.Seq2SeqLM, AudioToText)
    tasks = {name for name, obj in vars(m).items()
             if isinstance(obj, type) and issubclass(obj, bases) and obj not in bases}
    trained = {task for task, _, _ in FAMILIES.values()}
    assert tasks - trained == set(TASKS_LEFT_OUT), (tasks - trained) ^ set(TASKS_LEFT_OUT)


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
    """keras-hub#2806 on keras-hub's Llama: the MLP layer renamed; its key
    matches nothing and its weights are silently replicated. The report
    says so (``layout_checks.assert_report_flags_a_renamed_key``; the
    default suite checks the same on a plain Keras model)."""
    _, backbone, kwargs = FAMILIES["llama"]
    assert_report_flags_a_renamed_key(abstract(keras_hub, backbone, kwargs), mesh_of("2x4"))


@pytest.mark.timeout(1800)
def test_torch_local_storage_equals_the_report_and_a_dead_key_warns_once():
    """keras-hub's Llama on torch + parity (8 simulated ranks): every rank's
    local blocks add up to the report's bytes per device; a key renamed
    away warns once (two fits), naming the key and the nearest paths; JAX's
    Keras stays silent and gives the same losses
    (``keras_support/layout_checks.py --model llama``)."""
    runs = run_on_both_backends("llama", lambda backend: child_env(KERAS_BACKEND=backend),
                                "--measure-only")
    assert_storage_and_warning(runs["jax"][1], runs["torch"][1])


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
