"""Parity's own code inside ``torch.compile(fullgraph=True)`` under
``jax_semantics()``, over 8 simulated ranks on mesh (2, 4) ``data, model``
(backend ``aot_eager``, as the compiled conformance column runs).

Each test is one of the compile-error classes the compiled column found in
parity's code (README, "The compiled column"): a dim split minor-major
(``_StridedShard``: dynamo reads only its registered members), a mesh read
off a traced intermediate (no ``id()``), the mesh cache's lock, the SPMD
collectives (``DTensor.__new__``, process-group methods, a generator in
``math.prod``). Each compiled result is compared with the eager call's
values and spec.
"""

from __future__ import annotations

import numpy as np
import pytest
import sequential_collectives
import torch

import parity

HOST = np.arange(128, dtype=np.float32).reshape(8, 16)


@pytest.fixture(scope="module")
def sim8():
    from parity import torch_impl

    with torch_impl.simulate(8):
        yield torch_impl


def _mesh():
    return parity.DeviceMesh((2, 4), ("data", "model"))


def _x(ti, spec):
    return ti.distribute_tensor(HOST, parity.TensorLayout(spec, _mesh()))


def _compiled(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend="aot_eager", fullgraph=True, dynamic=False)


def _same(ti, compiled_out, eager_out):
    np.testing.assert_array_equal(ti.to_numpy(compiled_out), ti.to_numpy(eager_out))
    assert ti.describe(compiled_out).spec == ti.describe(eager_out).spec


def test_an_op_on_a_dim_split_minor_major_compiles(sim8):
    x = _x(sim8, (("model", "data"), None))  # a _StridedShard on mesh dim "data"
    with sim8.jax_semantics():
        got = _compiled(torch.exp)(x)
        want = torch.exp(x)
    _same(sim8, got, want)
    assert sim8.describe(got).spec == (("model", "data"), ())


def test_a_reduction_after_a_relayout_compiles(sim8):
    # prod over a sharded dim gathers it first; the result's mesh is read
    # off that traced intermediate.
    def prod0(a):
        return torch.prod(a, dim=0)

    x = _x(sim8, ("model", None))
    with sim8.jax_semantics():
        got = _compiled(prod0)(x)
        want = prod0(x)
    _same(sim8, got, want)


def test_distribute_tensor_compiles_inside_the_function(sim8):
    target = parity.TensorLayout((None, ("data", "model")), _mesh())

    def relayout(a):
        return sim8.distribute_tensor(a, target)

    x = _x(sim8, ("data", None))
    with sim8.jax_semantics():
        got = _compiled(relayout)(x)
    np.testing.assert_array_equal(sim8.to_numpy(got), HOST)
    assert sim8.describe(got).spec == ((), ("data", "model"))


@pytest.mark.parametrize("op", ["sum", "max", "mean"])
def test_all_reduce_compiles_to_the_eager_result(sim8, op):
    x = _x(sim8, ("data", "model"))

    def reduce(a):
        return sim8.all_reduce(a, op, axis_name="data")

    got, want = _compiled(reduce)(x), reduce(x)
    _same(sim8, got, want)


def test_all_gather_compiles_to_the_eager_result(sim8):
    x = _x(sim8, ("data", "model"))

    def gather(a):
        return sim8.all_gather(a, 1, "model")

    got, want = _compiled(gather)(x), gather(x)
    _same(sim8, got, want)


def test_reduce_scatter_compiles_to_the_eager_result(sim8):
    x = _x(sim8, (None, "model"))

    def scatter(a):
        return sim8.reduce_scatter(a, 0, "data", op="mean")

    got, want = _compiled(scatter)(x), scatter(x)
    _same(sim8, got, want)


def test_a_donating_collective_is_refused_inside_torch_compile(sim8):
    x = _x(sim8, ("data", None))

    def donating(a):
        return sim8.all_reduce(a, "sum", axis_name="data", donate=True)

    with pytest.raises(Exception) as info:
        _compiled(donating)(x)
    chain, err = [], info.value
    while err is not None:
        chain.append(err)
        err = err.__cause__ or err.__context__
    assert any("all_reduce(donate=True) inside torch.compile" in str(e) for e in chain), chain
    np.testing.assert_array_equal(sim8.to_numpy(x), HOST)  # x was not donated


def test_all_gather_variable_compiles_to_the_eager_result(sim8):
    x = _x(sim8, (("model", "data"), None))
    # under dynamo all_gather_variable is DTensor's redistribute, one gather
    # per mesh axis (collectives/traced.py), and DTensor says so: the known
    # limit kept out of the suite's guard, as in test_compiled_relayout
    with sequential_collectives.collected():
        got = _compiled(sim8.all_gather_variable)(x)
    with sequential_collectives.forbidden("the eager all_gather_variable"):
        want = sim8.all_gather_variable(x)
    _same(sim8, got, want)
    assert sim8.describe(got).spec == ((), ())


def test_tracing_parity_warns_nothing_about_its_caches(sim8):
    # Parity's lru_caches wrap pure functions of hashable arguments; dynamo
    # would warn once per call site that it traces through them, and those
    # warnings used to fill what a failing torchrun test prints.
    import warnings

    from torch._dynamo import utils as dynamo_utils

    dynamo_utils.warn_once_cache.clear()
    x = _x(sim8, ("model", None))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with sim8.jax_semantics():
            got = _compiled(lambda a: torch.prod(a, dim=0) + a.sum(0))(x)
    assert sim8.describe(got).spec is not None
    assert [str(w.message)[:120] for w in seen if "lru_cache" in str(w.message)] == []
