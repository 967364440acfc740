"""``shard_map`` on 4 gloo ranks, one block per process (marked
``multiprocess`` and ``slow``): every ``lax`` collective of
``tests/multiprocess/shard_map_cases.py``, its value, ``typeof`` and
gradient equal to ``jax.shard_map``'s on a (2, 2) mesh of 4 of JAX's
simulated devices; eager (Explicit axes) and, for the ``COMPILED`` cases,
with the mapped function under ``torch.compile`` (``aot_eager``, Explicit axes too), its backward
through the compiled graph."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from torchrun import run_torchrun

import parity
from parity import P, jax_ref

jax_ref.simulate(8)  # before JAX starts (collection time), as the other JAX test modules do

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]
sys.path.insert(0, str(Path(__file__).parent / "multiprocess"))

from shard_map_cases import CASES, IN, X  # noqa: E402


def jax_results() -> dict:
    import jax

    mesh = parity.make_mesh((2, 2), ("data", "model"), devices=jax_ref.list_devices()[:4])
    out = {}
    with jax_ref.set_mesh(mesh):
        for name, (body, out_spec) in CASES.items():
            mapped = jax_ref.shard_map(lambda b, body=body: body(jax_ref.lax, b),
                                       in_specs=P(*IN), out_specs=P(*out_spec))
            x = jax_ref.device_put(X, P(*IN))
            value = mapped(x)
            grad = jax.grad(lambda v: (mapped(v) ** 2 * 0.5).sum())(x)
            out[name] = {"value": np.asarray(value), "type": str(jax.typeof(value)),
                         "grad": np.asarray(grad), "grad_type": str(jax.typeof(grad))}
    return out


def run(*backends) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        result_file = Path(tmp) / "result.json"
        run_torchrun("shard_map_worker.py", nproc=4, timeout=600, args=backends,
                     env={"PARITY_RESULT_FILE": str(result_file)})
        return json.loads(result_file.read_text())


def check(ours: dict, theirs: dict) -> None:
    assert set(ours) <= set(theirs) and ours
    for name, got in ours.items():
        want = theirs[name]
        assert (got["type"], got["grad_type"]) == (want["type"], want["grad_type"])
        np.testing.assert_allclose(np.array(got["value"]), want["value"], rtol=1e-6, atol=1e-5)
        np.testing.assert_allclose(np.array(got["grad"]), want["grad"], rtol=1e-6, atol=1e-5)


def test_shard_map_on_gloo_ranks_eager_and_compiled_matches_jax():
    theirs = jax_results()
    results = run("aot_eager")
    check(results["eager"], theirs)
    assert set(results["eager"]) == set(CASES)
    check(results["aot_eager"], theirs)  # compiled: the COMPILED cases
