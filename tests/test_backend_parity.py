"""The same program on parity.jax_ref and parity.torch_impl, in one process:
equal ``describe()`` and equal values for every divisible layout on the
meshes (8,), (2,4), (4,2), (2,2,2), for each collective over every mesh axis,
for resharding, and the same error class for bad input."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import MESHES

import parity
from parity import jax_ref
from parity.backends import BACKEND_FUNCTIONS
from parity.layout_space import all_specs

jax_ref.simulate(8)

from parity import torch_impl  # noqa: E402

SHAPES = {1: (16,), 2: (8, 16), 3: (8, 16, 8)}


def host_array(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def both(program):
    """Run ``program(backend)`` on JAX, then on 8 simulated torch ranks."""
    with parity.use_backend("jax"):
        reference = program(jax_ref)
    with torch_impl.simulate(8):
        candidate = program(torch_impl)
    return reference, candidate


def layout_params():
    for mesh_id, (_, names) in MESHES.items():
        for rank in (1, 2, 3):
            yield pytest.param(mesh_id, rank, id=f"{mesh_id}-rank{rank}")


@pytest.mark.parametrize("mesh_id,rank", list(layout_params()))
def test_every_layout_has_the_same_placement_and_values(mesh_id, rank):
    host = host_array(SHAPES[rank])
    specs = list(all_specs(MESHES[mesh_id][1], rank))

    def program(backend):
        mesh = parity.DeviceMesh(*MESHES[mesh_id])
        out = []
        for spec in specs:
            x = backend.distribute_tensor(host, parity.TensorLayout.from_spec(spec, mesh))
            out.append((backend.describe(x), backend.to_numpy(x)))
        return out

    reference, candidate = both(program)
    for spec, (ref_p, ref_v), (cand_p, cand_v) in zip(specs, reference, candidate):
        assert cand_p == ref_p, f"{spec}: {ref_p.differences(cand_p)}"
        assert cand_p.dtype == ref_p.dtype
        np.testing.assert_array_equal(cand_v, ref_v)


def collective_params():
    for mesh_id in MESHES:
        _, names = MESHES[mesh_id]
        for axis_name in names:
            yield pytest.param(mesh_id, axis_name, id=f"{mesh_id}-{axis_name}")


@pytest.mark.parametrize("mesh_id,axis_name", list(collective_params()))
def test_each_collective_matches_over_every_mesh_axis(mesh_id, axis_name):
    host = host_array((16, 16), seed=3)
    specs = list(all_specs(MESHES[mesh_id][1], 2))[::4]

    def program(backend):
        mesh = parity.DeviceMesh(*MESHES[mesh_id])
        out = []
        for spec in specs:
            x = backend.distribute_tensor(host, parity.TensorLayout.from_spec(spec, mesh))
            results = [backend.all_reduce(x, op, axis_name=axis_name) for op in ("sum", "mean", "max", "min")]
            results += [backend.all_gather(x, axis, axis_name) for axis in (0, 1)]
            results += [backend.reduce_scatter(x, 1, axis_name)]
            out.append([(backend.describe(r), backend.to_numpy(r)) for r in results])
        return out

    reference, candidate = both(program)
    for spec, ref_results, cand_results in zip(specs, reference, candidate):
        for k, ((ref_p, ref_v), (cand_p, cand_v)) in enumerate(zip(ref_results, cand_results)):
            assert cand_p == ref_p, f"{spec} result {k}: {ref_p.differences(cand_p)}"
            np.testing.assert_allclose(cand_v, ref_v, rtol=1e-6, atol=1e-6, err_msg=f"{spec} result {k}")


def test_resharding_between_layouts_matches():
    host = host_array((8, 8, 8), seed=4)
    rng = np.random.default_rng(0)
    specs = list(all_specs(MESHES["2x2x2"][1], 3))
    pairs = [(specs[i], specs[j]) for i, j in rng.integers(0, len(specs), size=(25, 2))]

    def program(backend):
        mesh = parity.DeviceMesh(*MESHES["2x2x2"])
        out = []
        for src, dst in pairs:
            x = backend.distribute_tensor(host, parity.TensorLayout.from_spec(src, mesh))
            y = backend.distribute_tensor(x, parity.TensorLayout.from_spec(dst, mesh))
            out.append((backend.describe(y), backend.to_numpy(y)))
        return out

    reference, candidate = both(program)
    for (src, dst), (ref_p, ref_v), (cand_p, cand_v) in zip(pairs, reference, candidate):
        assert cand_p == ref_p, f"{src}->{dst}: {ref_p.differences(cand_p)}"
        np.testing.assert_array_equal(cand_v, ref_v)


BAD_INPUTS = {
    "unknown-axis": (lambda m: parity.TensorLayout(("expert", None), m), (8, 8), parity.LayoutError),
    "axis-twice": (lambda m: parity.TensorLayout(("data", "data"), m), (8, 8), parity.LayoutError),
    "rank-mismatch": (lambda m: parity.TensorLayout(("data",), m), (8, 8), parity.LayoutError),
    "indivisible": (lambda m: parity.TensorLayout(("data", "model"), m), (8, 6), parity.IndivisibleError),
}


@pytest.mark.parametrize("name", BACKEND_FUNCTIONS)
def test_every_backend_exports_each_backend_function(name):
    for module in (jax_ref, torch_impl):
        assert name in module.__all__, f"{module.__name__} does not export {name}"
        assert callable(getattr(module, name)), f"{module.__name__}.{name}"


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_raises_the_same_error_on_both(case):
    make_layout, shape, error = BAD_INPUTS[case]

    def program(backend):
        mesh = parity.DeviceMesh(*MESHES["2x4"])
        try:
            backend.distribute_tensor(np.ones(shape, np.float32), make_layout(mesh))
        except parity.ParityError as err:
            return type(err)
        return None

    reference, candidate = both(program)
    assert reference is error and candidate is error


def test_device_count_mismatch_raises_on_both():
    def program(backend):
        with pytest.raises(parity.LayoutError, match="number of devices"):
            parity.DeviceMesh((4, 4), ("data", "model"))
        return True

    assert both(program) == (True, True)


def test_mean_of_integers_is_float32_on_both():
    host = np.arange(64, dtype=np.int32).reshape(8, 8)

    def program(backend):
        mesh = parity.DeviceMesh(*MESHES["2x4"])
        x = backend.distribute_tensor(host, parity.TensorLayout(("data", "model"), mesh))
        out = [backend.all_reduce(x, "mean", axis_name="model"), backend.reduce_scatter(x, 0, "data", op="mean")]
        return [(backend.describe(o), backend.to_numpy(o)) for o in out]

    reference, candidate = both(program)
    for (ref_p, ref_v), (cand_p, cand_v) in zip(reference, candidate):
        assert cand_p == ref_p and cand_p.dtype == ref_p.dtype == "float32"
        np.testing.assert_allclose(cand_v, ref_v)
