"""keras-hub as published (issue 12, point 1): every keras-hub 0.32.0
backbone with ``get_layout_map`` (Gemma, Llama, Llama3, Qwen, Qwen2,
QwenMoe, Qwen3-MoE), as a tiny random CausalLM, plus a BERT classifier with
a hand-written Megatron map, on (2, 4) and (1, 8) ``("batch", "model")``
meshes: ``fit`` / ``evaluate`` / ``predict`` under torch + parity equal the
JAX backend from the same initial weights (``set_weights``), and every
variable is physically sharded as its layout says. One model also runs under
torchrun on 4 gloo ranks.

keras-hub requires TensorFlow, which these tests never use, so they are
their own marked group, run by ``scripts/keras_hub.sh`` (it installs
keras-hub without TensorFlow into the ``.keras-hub`` overlay):

    bash scripts/keras_hub.sh [-k 2x4]

Without keras_hub installed they are skipped. The driver is
``tests/keras_support/hub_driver.py``.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
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
    pytest.mark.timeout(3600),
]
ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "keras_support" / "hub_driver.py"
MODELS = ["gemma", "llama", "llama3", "qwen", "qwen2", "qwen_moe", "qwen3_moe", "bert"]
CONFIGS = [f"{m}:{mesh}" for m in MODELS for mesh in ("2x4", "1x8")]
LOSS_RTOL = 1e-5
WEIGHT_ATOL = 1e-4
STEPS = "2"


def launch(backend: str, configs, *args: str) -> subprocess.Popen:
    env = child_env(KERAS_BACKEND=backend)
    env["XLA_FLAGS"] = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    return subprocess.Popen(
        [sys.executable, str(DRIVER), "--configs", ",".join(configs), "--steps", STEPS, *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )


def results_of(text: str) -> dict[str, dict]:
    out = {}
    for line in text.splitlines():
        if line.startswith("HUB_RESULT "):
            result = json.loads(line[len("HUB_RESULT "):])
            out[result["config"]] = result
    return out


def finish(proc: subprocess.Popen, timeout: float) -> dict[str, dict]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, (out[-2000:] + err[-6000:])
    return results_of(out)


@pytest.fixture(scope="module")
def runs(request):
    # Only the configs this session selected (``-k gemma``, ``-k 2x4``): each
    # config costs minutes on 2 cores.
    selected = [item.callspec.params["config"] for item in request.session.items
                if hasattr(item, "callspec") and "config" in item.callspec.params]
    configs = [c for c in CONFIGS if c in selected] or CONFIGS
    # The torch side takes most of the time (every op on 8 simulated ranks
    # in one Python process): two torch drivers, each with half the configs,
    # keep both cores busy once the JAX driver is done.
    # JAX runs first, alone: XLA:CPU aborts a collective whose device
    # threads a busy neighbour starves for 40 s (CI stop 28).
    jax_proc = launch("jax", configs)
    try:
        jax = finish(jax_proc, 3500)
    finally:
        if jax_proc.poll() is None:
            jax_proc.kill()
    halves = [half for half in (configs[0::2], configs[1::2]) if half]
    procs = [launch("torch", half) for half in halves]
    try:
        # Read every driver's pipes at once: one waiting on a full pipe
        # would otherwise stall while another is read to its end.
        with ThreadPoolExecutor(len(procs)) as pool:
            torch_halves = list(pool.map(lambda p: finish(p, 3500), procs))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return jax, {config: result for half in torch_halves for config, result in half.items()}


def compare(ref: dict, got: dict) -> dict:
    """Assert equality within the tolerances; return the largest differences."""
    np.testing.assert_allclose(got["losses"], ref["losses"], rtol=LOSS_RTOL)
    for key in ref["evaluate"]:
        np.testing.assert_allclose(got["evaluate"][key], ref["evaluate"][key], rtol=LOSS_RTOL)
    np.testing.assert_allclose(got["predict"], ref["predict"], atol=WEIGHT_ATOL)
    assert set(got["weights"]) == set(ref["weights"])
    weight = max(float(np.max(np.abs(np.subtract(ref["weights"][k], got["weights"][k]))))
                 for k in ref["weights"])
    assert weight < WEIGHT_ATOL, weight
    return {
        "loss_rel": float(np.max(np.abs(np.subtract(got["losses"], ref["losses"]))
                                 / np.abs(ref["losses"]))),
        "weight": weight,
        "step_s": float(np.median(got["step_seconds"][1:] or got["step_seconds"])),
        "jax_step_s": float(np.median(ref["step_seconds"][1:] or ref["step_seconds"])),
    }


def check_sharding(result: dict, n_ranks_per_mesh: tuple) -> None:
    """Each variable's spec is its layout's, and the block a rank holds is
    the global shape divided by the shard counts (physically sharded)."""
    sizes = dict(zip(("batch", "model"), n_ranks_per_mesh))
    assert result["specs"] == result["expected_specs"]
    for path, spec in result["specs"].items():
        shape = result["shapes"][path]
        want = [n // int(np.prod([sizes[a] for a in axes])) for n, axes in zip(shape, spec)]
        assert result["local_shapes"][path] == want, (path, shape, spec)


@pytest.mark.parametrize("config", CONFIGS)
def test_keras_hub_model_matches_jax_and_is_sharded_as_its_layout_map(runs, config):
    jax, torch = runs
    diffs = compare(jax[config], torch[config])
    check_sharding(torch[config], tuple(torch[config]["mesh"]))
    assert torch[config]["specs"] == jax[config]["specs"]
    print(config, json.dumps(diffs))


@pytest.mark.multiprocess
def test_keras_hub_llama_under_torchrun_4_ranks_matches_jax(tmp_path):
    from torchrun import run_torchrun

    # JAX first, then the ranks: never both at once (XLA:CPU aborts a
    # collective whose device threads the ranks starve for 40 s; CI stop 28).
    jax_proc = launch("jax", ["llama:2x2"], "--devices", "4")
    try:
        jax = finish(jax_proc, 1800)
    finally:
        if jax_proc.poll() is None:
            jax_proc.kill()
    out = tmp_path / "hub"
    torch_out = run_torchrun("keras_hub_worker.py", nproc=4, timeout=1800,
                             args=("--configs", "llama:2x2", "--steps", STEPS, "--out", str(out)))
    ranks = []
    for path in sorted(tmp_path.glob("hub.rank*.jsonl")):
        ranks.extend(results_of(path.read_text()).values())
    assert sorted(r["rank"] for r in ranks) == [0, 1, 2, 3], torch_out[-3000:]
    for result in ranks:
        diffs = compare(jax["llama:2x2"], result)
        check_sharding(result, (2, 2))
        print("llama:2x2 torchrun rank", result["rank"], json.dumps(diffs))
