"""Keras's own distribution tests, as shipped in the installed keras package
(issue 5, point 6): run under JAX and under torch with parity installed, each
in its own process (``tests/keras_support/shipped.py``); every test that
passes on JAX passes on torch, except the ones listed in ``EXCEPTIONS`` (and
in docs/keras.md, "Keras's own distribution tests", with the reason).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs_keras_extra
from subprocess_env import child_env

pytestmark = [
    needs_keras_extra,
    pytest.mark.timeout(600),
]
ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "tests" / "keras_support" / "shipped.py"

# Backend-specific twins, not distribution tests: each backend runs its own.
EXCEPTIONS = {
    "trainers/data_adapters/data_adapter_utils_test.py::TestClassWeightToSampleWeights::"
    "test_class_weight_to_sample_weights_jax_specific": "skipif(backend != jax); "
    "its torch twin ..._torch_specific passes on torch",
}


def run(backend: str, out: Path) -> subprocess.Popen:
    env = child_env()
    return subprocess.Popen(
        [sys.executable, str(HARNESS), backend, str(out)], env=env, cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shipped")
    procs = {b: run(b, tmp / f"{b}.json") for b in ("jax", "torch")}
    try:
        for backend, proc in procs.items():
            out, _ = proc.communicate(timeout=500)
            assert proc.returncode == 0, f"{backend}: {out[-4000:]}"
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    return {b: json.loads((tmp / f"{b}.json").read_text())["results"] for b in procs}


def test_shipped_tests_ran(outcomes):
    jax, torch = outcomes["jax"], outcomes["torch"]
    assert set(jax) == set(torch)
    assert sum(r["outcome"] == "passed" for r in torch.values()) >= 35, torch


def test_shipped_tests_passing_on_jax_pass_on_torch(outcomes):
    jax, torch = outcomes["jax"], outcomes["torch"]
    regressions = {
        node: torch[node]["detail"][-800:]
        for node, result in jax.items()
        if result["outcome"] == "passed"
        and torch.get(node, {}).get("outcome") != "passed"
        and node not in EXCEPTIONS
    }
    assert not regressions, json.dumps(regressions, indent=1)


def test_shipped_tests_no_failures_on_torch(outcomes):
    failed = {n: r["detail"][-800:] for n, r in outcomes["torch"].items() if r["outcome"] == "failed"}
    assert not failed, json.dumps(failed, indent=1)
