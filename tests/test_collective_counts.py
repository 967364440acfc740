"""No more communication than JAX (issue 15, item 4): the collectives one
training step of the tensor-parallel (Megatron) MLP issues under
``jax_semantics()`` -- eager and under ``torch.compile`` -- against the
collectives in JAX's compiled HLO for the same step, mesh and layouts
(``jax.jit(step).lower(...).compile().as_text()``).

The torch side runs on real gloo ranks (``multiprocess/collective_count_worker.py``,
counted from the profiler's process-group ops); the JAX side runs this file
as a script (``python tests/test_collective_counts.py 1d|2d``) on simulated
CPU devices, and prints, per kind, the collective ops in the HLO ("launches")
and the arrays they carry ("operands": XLA's all-reduce combiner folds
several reductions into one tuple all-reduce).

Measured (torch 2.13, jax 0.10.2): mesh (2,) ``model``: parity 1 all-reduce
eager and compiled, JAX 1. Mesh (2, 2) ``batch, model`` with x's rows on
``batch``: JAX 2 launches carrying 4 arrays (the forward's partial sum on
``model``; the loss and both weight gradients on ``batch`` in one combined
all-reduce). parity eager (``jax_semantics()``, pending sums kept): JAX's
2 -- the forward's partial sum (completed before ``- 1``, a scalar added to
it), and the loss, whose mean stays pending into the backward, with both
weight gradients in the bucket's one all-reduce at the end of
``backward()`` (``collectives/gradient_buckets``). parity eager under
``jax_semantics(defer=False)``: 3 -- the forward's partial sum, the loss
(the forward's ``mean`` completes it), and both weight gradients in one
all-reduce. parity compiled (``defer=False``): 4 -- the
backward is AOTAutograd's compiled graph, run as one autograd node, and the
gradient all-reduces traced into it are not combined by ``aot_eager``.
parity's ``aot_eager_bucketed`` backend (``collectives/compiled_buckets.py``:
``aot_eager`` with inductor's all-reduce bucketing pass on the forward and
backward graphs): 3 -- the backward's two weight gradients in one
all-reduce; the loss cannot join them, the forward graph hands it back
completed before the backward graph runs. ``torch.compile(step)`` with no
backend named (inductor, what users get): 3 as well -- ``jax_semantics()``
turns inductor's ``bucket_all_reduces_fx`` on for its thread. parity does no
redistribution JAX does not do; the counts are pinned below, so a change
either way shows.

The Keras parity driver's models (``tests/keras_support/parity_driver.py``,
``mlp:mp`` and ``transformer:mp``, 2 gloo ranks / 2 CPU devices, mesh (1, 2))
are counted the same way: parity's eager ``train_on_batch``
(``multiprocess/keras_collective_count_worker.py``) against the HLO of the
JAX backend's jitted train step, which this file, run as a script
(``python tests/test_collective_counts.py keras mlp transformer``), reads
from XLA's dump of the optimized module.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import needs_keras_extra

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
ROOT = Path(__file__).resolve().parents[1]


def hlo_collectives(hlo: str) -> dict[str, dict[str, int]]:
    """Per collective kind in compiled HLO text: ``launches`` (instructions,
    async ``-start`` counted once) and ``operands`` (arrays they reduce or
    gather)."""
    out = {}
    for kind in KINDS:
        launches = operands = 0
        for match in re.finditer(rf" {kind}(?:-start)?\(([^)]*)\)", hlo):
            launches += 1
            operands += len([a for a in match.group(1).split(",") if a.strip().startswith("%")])
        if launches:
            out[kind] = {"launches": launches, "operands": operands}
    return out


def jax_step_hlo(mesh_kind: str) -> str:
    """The compiled HLO of ``jax.jit`` of the worker's step (value_and_grad
    of the MLP loss, SGD update) with the worker's layouts."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    if mesh_kind == "2d":
        mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("batch", "model"))
        x_spec = P("batch", None)
    else:
        mesh = Mesh(np.array(jax.devices()[:2]), ("model",))
        x_spec = P()

    def loss_fn(p, x):
        return jnp.mean((jnp.tanh(x @ p[0]) @ p[1] - 1) ** 2)

    def step(p, x):
        loss, g = jax.value_and_grad(loss_fn)(p, x)
        return loss, tuple(w - 0.1 * gw for w, gw in zip(p, g))

    weights = (NamedSharding(mesh, P(None, "model")), NamedSharding(mesh, P("model", None)))
    jitted = jax.jit(step, in_shardings=(weights, NamedSharding(mesh, x_spec)),
                     out_shardings=(NamedSharding(mesh, P()), weights))
    p = (jnp.zeros((16, 32), jnp.float32), jnp.zeros((32, 8), jnp.float32))
    return jitted.lower(p, jnp.zeros((8, 16), jnp.float32)).compile().as_text()


def keras_jax_counts(models: list[str]) -> dict[str, dict[str, dict[str, int]]]:
    """Per Keras parity-driver model (``mlp``, ``transformer``; ``mp`` on 2
    devices, mesh (1, 2)): the collectives in the HLO of the JAX backend's
    compiled train step (``jit_compile=True``), read from XLA's dump of the
    optimized module (``--xla_dump_to``). Keras must not be imported yet
    (``KERAS_BACKEND`` is read on import)."""
    import glob
    import shutil
    from types import SimpleNamespace

    sys.path.insert(0, str(ROOT / "tests" / "keras_support"))
    import parity_driver

    import keras

    dump = os.environ["PARITY_XLA_DUMP"]
    out = {}
    for model in models:
        args = SimpleNamespace(model=model, dist="mp", jit=True, torchrun=False, steps=1,
                               devices=2)
        distribution = parity_driver.make_distribution(args, keras, 2)
        x, y = parity_driver.make_data(args, 1, 16)
        with distribution.scope():
            m = parity_driver.build_model(args, keras)
            m.set_weights(parity_driver.initial_weights(m))
            m.train_on_batch(x, y)
        (path,) = glob.glob(f"{dump}/*jit_train_step*after_optimizations.txt")
        out[model] = hlo_collectives(Path(path).read_text())
        shutil.rmtree(dump)
        os.makedirs(dump)
    return out


def jax_counts(mesh_kind: str) -> dict[str, dict[str, int]]:
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=4")
    proc = subprocess.run([sys.executable, __file__, mesh_kind], env=env, capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def worker_result(script: str, nproc: int, args: tuple) -> dict:
    """What rank 0 of ``tests/multiprocess/<script>`` on ``nproc`` gloo ranks reports."""
    from torchrun import run_torchrun

    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        run_torchrun(script, nproc=nproc, timeout=600, args=args,
                     env={"PARITY_RESULT_FILE": str(result)})
        return json.loads(result.read_text())


def parity_counts(mesh_kind: str, nproc: int) -> dict[str, dict[str, int]]:
    return worker_result("collective_count_worker.py", nproc, (mesh_kind,))


def start_jax_keras_counts(models: tuple[str, ...], dump: str) -> subprocess.Popen:
    """Start the JAX side of the Keras count (read it before the gloo ranks start)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", KERAS_BACKEND="jax", PARITY_XLA_DUMP=dump,
               XLA_FLAGS=f"--xla_force_host_platform_device_count=2 --xla_dump_to={dump} "
                         "--xla_dump_hlo_as_text")
    return subprocess.Popen([sys.executable, __file__, "keras", *models], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def jax_keras_counts(proc: subprocess.Popen) -> dict[str, dict[str, dict[str, int]]]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


def parity_keras_counts(models: tuple[str, ...]) -> dict[str, dict[str, int]]:
    return worker_result("keras_collective_count_worker.py", 2, models)


def test_hlo_collectives_counts_a_combined_all_reduce_by_its_operands():
    hlo = ("%all-reduce = f32[4,8]{1,0} all-reduce(%fusion.1), channel_id=1\n"
           "%all-reduce.4 = (f32[], f32[16,16]{1,0}) all-reduce(%m, %dot.3), channel_id=2\n"
           "%ag = f32[8]{0} all-gather-start(%p), dimensions={0}\n"
           "%agd = f32[8]{0} all-gather-done(%ag)\n")
    assert hlo_collectives(hlo) == {"all-reduce": {"launches": 2, "operands": 3},
                                    "all-gather": {"launches": 1, "operands": 1}}


@pytest.mark.multiprocess
@pytest.mark.slow
def test_tensor_parallel_mlp_step_issues_no_more_collectives_than_jax():
    """Mesh (2,) ``model``: the same single all-reduce (the row-parallel
    matmul's partial sum), eager and compiled."""
    jax = jax_counts("1d")
    assert jax == {"all-reduce": {"launches": 1, "operands": 1}}, jax
    got = parity_counts("1d", nproc=2)
    for run in ("eager", "eager at once", "compiled", "compiled bucketed"):
        assert set(got[run]) <= set(jax), (run, got[run])
        for kind, n in got[run].items():
            assert n <= jax[kind]["launches"], (run, kind, n, jax)
        # both weights sharded on the one axis: their gradients need no reduction
        assert got[run + " in backward"] == {}, (run, got)


@pytest.mark.multiprocess
@pytest.mark.slow
def test_data_and_tensor_parallel_mlp_step_buckets_the_gradient_reductions():
    """Mesh (2, 2) ``batch, model``: parity reduces the same 4 arrays as JAX
    and nothing else. Eager (the default, pending sums kept): JAX's 2, one
    per group -- the forward's partial sum on ``model`` (completed before
    the scalar ``- 1``), and on ``batch`` the loss's pending mean (kept as
    the pending sum it equals) with both weight gradients (the bucket,
    ``add_root``); eager under ``jax_semantics(defer=False)``: 3 launches
    (the forward's partial sum, the loss, both weight gradients in one
    bucket) where XLA's combiner launches 2 (it also folds the loss into the
    gradients' launch); the compiled runs, under ``defer=False``: with
    ``aot_eager``: 4 (one per array); with ``aot_eager_bucketed``: 3 (both
    weight gradients in one); ``torch.compile(step)``, no backend named
    (inductor): 3, bucketed by ``jax_semantics()``. All give the same
    weights and placements; the loss too, inductor's to float32's
    rounding (its fused kernel computes ``mean((h - 1) ** 2)`` in another
    order).

    One gradient launch per group: both weights are replicated on
    ``batch``, so both gradients pend on that one group, and inside
    ``backward()`` parity launches one all-reduce for them (eager, the
    loss's pending mean in the same launch; eager with ``defer=False``; with
    ``aot_eager_bucketed``; with inductor), as XLA's combiner does. Only
    plain ``aot_eager`` launches one per gradient."""
    jax = jax_counts("2d")
    assert jax == {"all-reduce": {"launches": 2, "operands": 4}}, jax
    got = parity_counts("2d", nproc=4)
    assert got["eager"] == {"all-reduce": jax["all-reduce"]["launches"]}, got
    assert got["eager at once"] == {"all-reduce": 3}, got
    assert got["compiled"] == {"all-reduce": jax["all-reduce"]["operands"]}, got
    assert got["compiled bucketed"] == {"all-reduce": 3}, got
    assert got["compiled default"] == {"all-reduce": 3}, got
    for run in ("eager", "eager at once", "compiled bucketed", "compiled default"):
        assert got[run + " in backward"] == {"all-reduce": 1}, (run, got)
    assert got["compiled in backward"] == {"all-reduce": 2}, got
    assert (got["eager values"] == got["eager at once values"] == got["compiled values"]
            == got["compiled bucketed values"]), got
    inductor, eager = dict(got["compiled default values"]), dict(got["eager values"])
    torch_loss, eager_loss = inductor.pop("loss"), eager.pop("loss")
    assert inductor == eager, got
    assert torch_loss == pytest.approx(eager_loss, rel=1.3e-6), got  # torch's float32 rtol


def launches(counts: dict) -> int:
    """Collective launches in ``{kind: n}`` (parity) or ``{kind: {"launches": n, ...}}`` (HLO)."""
    return sum(v["launches"] if isinstance(v, dict) else v for v in counts.values())


@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.timeout(900)
@needs_keras_extra
def test_keras_model_parallel_train_steps_launch_no_more_collectives_than_jax():
    """The Keras parity driver's MLP and transformer block (``mp``, 2 gloo
    ranks / 2 CPU devices, mesh (1, 2) ``batch, model``, the driver's
    layouts) one eager ``train_on_batch`` under parity against the JAX
    backend's compiled train step. MLP: the same collectives (the
    row-parallel partial sum; the two gathers the ``.*dense.*output``
    layouts ask for). Transformer block: parity launches 18 (11 all-gathers,
    3 all-reduces, 4 reduce-scatters) where XLA launches 38 (26 all-gathers,
    12 all-reduces carrying 18 arrays). Both sides pinned, so a change
    either way shows."""
    models = ("mlp", "transformer")
    with tempfile.TemporaryDirectory() as dump:
        # JAX first, then the gloo ranks: never both at once (on 2 cores the
        # ranks can starve a JAX device thread past XLA:CPU's 40 s collective
        # rendezvous limit, and XLA aborts; CI stop 28).
        jax = jax_keras_counts(start_jax_keras_counts(models, dump))
        got = parity_keras_counts(models)
    assert jax == {
        "mlp": {"all-reduce": {"launches": 1, "operands": 1},
                "all-gather": {"launches": 2, "operands": 2}},
        "transformer": {"all-reduce": {"launches": 12, "operands": 18},
                        "all-gather": {"launches": 26, "operands": 26}},
    }, jax
    assert got == {"mlp": {"all-reduce": 1, "all-gather": 2},
                   "transformer": {"all-gather": 11, "all-reduce": 3, "reduce-scatter": 4}}, got
    for model in models:
        assert launches(got[model]) <= launches(jax[model]), (model, got[model], jax[model])


if __name__ == "__main__":
    if sys.argv[1] == "keras":
        print(json.dumps(keras_jax_counts(sys.argv[2:])))
    else:
        print(json.dumps(hlo_collectives(jax_step_hlo(sys.argv[1]))))
