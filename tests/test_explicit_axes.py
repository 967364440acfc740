"""Issue 26: JAX's explicit-sharding model -- ``AxisType``, ``make_mesh``,
``P`` on the ambient mesh, ``typeof``, ``reshard``,
``with_sharding_constraint``, Explicit axes under ``jax_semantics()`` and
``shard_map`` with ``lax`` collectives.

Every behaviour is checked against JAX 0.10.2 itself (``jax.typeof``,
``jax.sharding.reshard``, ``jax.shard_map``, ``jax.grad``, JAX's
``ShardingTypeError``) on 8 simulated devices, and the torch backend against
the same: strings of ``typeof`` equal, values equal, gradients' shardings
equal, errors of the same kind."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import parity
from parity import P, jax_ref

jax_ref.simulate(8)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType as JaxAxisType  # noqa: E402

from parity import torch_impl as ti  # noqa: E402

DATA = np.arange(64.0, dtype=np.float32).reshape(8, 8)
JaxShardingTypeError = jax._src.core.ShardingTypeError  # noqa: SLF001


def jax_mesh(axis_types=None):
    return parity.make_mesh((2, 4), ("data", "model"), axis_types=axis_types,
                            devices=jax_ref.list_devices())


def torch_mesh(axis_types=None):
    return parity.make_mesh((2, 4), ("data", "model"), axis_types=axis_types)


# ---------------------------------------------------------------- neutral API

def test_mesh_axis_types_default_as_jax():
    devices = [f"cpu:{i}" for i in range(8)]
    assert parity.DeviceMesh((2, 4), ("d", "m"), devices).axis_types == (parity.AxisType.Auto,) * 2
    made = parity.make_mesh((2, 4), ("d", "m"), devices=devices)
    assert made.axis_types == (parity.AxisType.Explicit,) * 2
    assert jax.make_mesh((2, 4), ("d", "m")).axis_types == (JaxAxisType.Explicit,) * 2
    assert jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("d", "m")).axis_types \
        == (JaxAxisType.Auto,) * 2
    assert made != made.with_axis_types(parity.AxisType.Auto)  # as JAX's Mesh.__eq__
    mixed = parity.DeviceMesh((2, 4), ("d", "m"), devices, axis_types=("explicit", "auto"))
    assert mixed.axes_of_type(parity.AxisType.Explicit) == ("d",)
    with pytest.raises(parity.LayoutError, match="2 entries for a mesh of 1"):
        parity.DeviceMesh((8,), ("x",), devices, axis_types=("explicit", "auto"))
    with pytest.raises(parity.LayoutError, match="not an axis type"):
        parity.DeviceMesh((8,), ("x",), devices, axis_types="sideways")


def test_partition_spec_pads_and_refuses_what_it_cannot_do():
    assert P("data").spec_for(3) == (("data",), (), ())
    assert P(("data", "model"), None) == P(("data", "model"), None)
    with pytest.raises(parity.LayoutError, match="used twice"):
        P("data", "data")
    with pytest.raises(parity.LayoutError, match="rank 1"):
        P("data", None).spec_for(1)
    with pytest.raises(parity.UnsupportedOpError, match="reduced"):
        P("data", reduced={"model"})
    with pytest.raises(parity.LayoutError, match="cannot overlap"):
        P("model", unreduced={"model"})
    with pytest.raises(parity.LayoutError, match="set of mesh axis names"):
        P("data", unreduced="model")
    spec = P("data", None, unreduced={"model"})
    assert repr(spec) == repr(jax.sharding.PartitionSpec("data", None, unreduced={"model"}))
    assert spec != P("data", None) and spec.without_unreduced() == P("data", None)
    assert spec.unreduced == frozenset({"model"})


def test_set_mesh_is_per_thread_and_nests():
    devices = [f"cpu:{i}" for i in range(8)]
    outer = parity.make_mesh((8,), ("x",), devices=devices)
    inner = parity.make_mesh((2, 4), ("data", "model"), devices=devices)
    seen = []
    with parity.ambient.set_mesh(outer):
        with parity.ambient.set_mesh(inner):
            assert parity.ambient.get_mesh() is inner
            thread = threading.Thread(target=lambda: seen.append(parity.ambient.get_mesh()))
            thread.start()
            thread.join()
        assert parity.ambient.get_mesh() is outer
    assert parity.ambient.get_mesh() is None and seen == [None]
    with pytest.raises(parity.LayoutError, match="needs an ambient mesh"):
        parity.ambient.to_layout(P("x"), 1, "reshard")


def test_layout_map_takes_p_on_the_ambient_or_its_own_mesh():
    devices = [f"cpu:{i}" for i in range(8)]
    mesh = parity.make_mesh((2, 4), ("data", "model"), devices=devices)
    other = parity.make_mesh((8,), ("x",), devices=devices)
    own = parity.LayoutMap(mesh)
    own["dense.*kernel"] = P(None, "model")
    assert own["dense_1/kernel"] == parity.TensorLayout((None, "model"), mesh)
    bare = parity.LayoutMap()
    with pytest.raises(parity.LayoutError, match=r"LayoutMap\['bias'\]: P\('data'\) needs an "
                                                 "ambient mesh"):
        bare["bias"] = P("data")
    with parity.ambient.set_mesh(mesh):
        bare["bias"] = P("data")
        with pytest.raises(parity.LayoutError, match="unreduced"):
            bare["sum"] = P("data", unreduced={"model"})
    assert bare["bias"] == parity.TensorLayout(("data",), mesh)
    with parity.ambient.set_mesh(other), pytest.raises(parity.LayoutError, match="the map is on"):
        own["other"] = P("x")


def test_distribute_takes_p_on_the_ambient_mesh_on_both_backends(sim8):
    """``distribute_tensor`` / ``distribute_variable`` with a ``P``: the
    layout it names on the ambient mesh, on both backends alike; without an
    ambient mesh a ``LayoutError`` that says so."""
    found = {}
    for name, backend, mesh in (("jax", jax_ref, jax_mesh()), ("torch", ti, torch_mesh())):
        with pytest.raises(parity.LayoutError, match=r"distribute_tensor: P\('data'\) needs an "
                                                     "ambient mesh"):
            backend.distribute_tensor(DATA, P("data"))
        with backend.set_mesh(mesh):
            x = backend.distribute_tensor(DATA, P("data"))
            v = backend.distribute_variable(DATA, P(None, "model"))
            with pytest.raises(parity.LayoutError, match="rank 2"):
                backend.distribute_tensor(DATA, P("data", None, None))
            with pytest.raises(parity.LayoutError, match="unreduced"):
                backend.distribute_tensor(DATA, P("data", unreduced={"model"}))
        assert backend.describe(x) == backend.describe(
            backend.distribute_tensor(DATA, parity.TensorLayout(("data", None), mesh)))
        found[name] = (backend.describe(x), backend.describe(v), backend.to_numpy(v))
    assert found["jax"][:2] == found["torch"][:2]
    assert found["torch"][1].spec == ((), ("model",))
    np.testing.assert_array_equal(found["jax"][2], found["torch"][2])
    with ti.set_mesh(torch_mesh()):
        assert isinstance(ti.distribute_variable(DATA, P("data")), torch.nn.Parameter)


# ---------------------------------------------------------------- typeof, reshard

SPECS = [P("data", "model"), P("model", None), P(("data", "model"), None), P(None, "data"), P()]


@pytest.mark.parametrize("types", [None, "auto", ("explicit", "auto")])
def test_typeof_strings_equal_jax_on_both_backends(sim8, types):
    jm, tm = jax_mesh(types), torch_mesh(types)
    for spec in SPECS:
        with jax_ref.set_mesh(jm):
            expected = str(jax.typeof(jax.device_put(DATA, jax.sharding.PartitionSpec(*spec))))
            assert str(jax_ref.typeof(jax_ref.device_put(DATA, spec))) == expected
        with ti.set_mesh(tm):
            assert str(ti.typeof(ti.device_put(DATA, spec))) == expected, spec
    with ti.set_mesh(tm):
        assert str(ti.typeof(ti.device_put(DATA.astype(np.int32), P("data")))) == (
            "int32[8@data,8]" if types != "auto" else "int32[8,8]")


def test_the_issue_program_runs_alike(sim8):
    """The program of issue 26, on JAX, jax_ref and torch_impl."""
    jm, tm = jax_mesh(), torch_mesh()
    with jax_ref.set_mesh(jm):
        jx = jax_ref.device_put(DATA, P("data", "model"))
        jy = jax_ref.reshard(jx, P("model", None))
        with pytest.raises(JaxShardingTypeError, match="consistent sharding"):
            jx @ jx
        jz = jax_ref.shard_map(lambda b: jax_ref.lax.psum(b, "model"),
                               in_specs=P("data", "model"), out_specs=P("data", None))(jx)
    with ti.set_mesh(tm):
        x = ti.device_put(DATA, P("data", "model"))
        y = ti.reshard(x, P("model", None))
        with ti.jax_semantics(), pytest.raises(parity.ShardingTypeError) as info:
            x @ x
        z = ti.shard_map(lambda b: ti.lax.psum(b, "model"),
                         in_specs=P("data", "model"), out_specs=P("data", None))(x)
    assert info.value.specs == ((("data",), ("model",)),) * 2 and "reshard(" in info.value.fix
    assert info.value.category == "ambiguous-sharding"
    for j, t in ((jx, x), (jy, y), (jz, z)):
        assert str(ti.typeof(t)) == str(jax.typeof(j))
        np.testing.assert_array_equal(ti.to_numpy(t), np.asarray(j))
        assert ti.describe(t) == jax_ref.describe(j)


def test_reshard_gradient_comes_back_in_the_inputs_sharding(sim8):
    jm, tm = jax_mesh(), torch_mesh()
    loss = lambda r: lambda v: (r(v, P("model", None)) ** 2 * 0.5).sum()  # noqa: E731
    with jax_ref.set_mesh(jm):
        jx = jax_ref.device_put(DATA, P("data", "model"))
        jg = jax.grad(loss(jax_ref.reshard))(jx)
    with ti.set_mesh(tm):
        x = ti.device_put(DATA, P("data", "model")).requires_grad_()
        loss(ti.reshard)(x).backward()
    assert str(ti.typeof(x.grad)) == str(jax.typeof(jg)) == "float32[8@data,8@model]"
    np.testing.assert_array_equal(ti.to_numpy(x.grad), np.asarray(jg))


def test_with_sharding_constraint_asserts_on_explicit_and_reshards_on_auto(sim8):
    with jax_ref.set_mesh(jax_mesh()):
        jx = jax_ref.device_put(DATA, P("data", "model"))
        with pytest.raises(AssertionError, match="reshard"):
            jax_ref.with_sharding_constraint(jx, P(None, "data"))
        assert jax_ref.with_sharding_constraint(jx, P("data", "model")) is not None
    with ti.set_mesh(torch_mesh()):
        x = ti.device_put(DATA, P("data", "model"))
        with pytest.raises(parity.ShardingTypeError, match=r"reshard\(x, P\(None, 'data'\)\)"):
            ti.with_sharding_constraint(x, P(None, "data"))
        assert ti.with_sharding_constraint(x, P("data", "model")) is x
    jam, tam = jax_mesh("auto"), torch_mesh("auto")
    with jax_ref.set_mesh(jam):
        jc = jax.jit(lambda v: jax_ref.with_sharding_constraint(v, P(None, "data")))(
            jax_ref.device_put(DATA, P("data", "model")))
    with ti.set_mesh(tam):
        c = ti.with_sharding_constraint(ti.device_put(DATA, P("data", "model")), P(None, "data"))
    assert ti.describe(c) == jax_ref.describe(jc)


# ---------------------------------------------------------------- Explicit axes under jax_semantics

def _jax_outcome(fn, arrays, specs, types):
    with jax_ref.set_mesh(jax_mesh(types)):
        xs = [jax_ref.device_put(a, s) for a, s in zip(arrays, specs)]
        try:
            out = fn(*xs)
        except JaxShardingTypeError:
            return None
        return str(jax.typeof(out)), np.asarray(out)


def _torch_outcome(fn, arrays, specs, types):
    with ti.set_mesh(torch_mesh(types)), ti.jax_semantics():
        xs = [ti.device_put(a, s) for a, s in zip(arrays, specs)]
        try:
            out = fn(*xs)
        except parity.ShardingTypeError:
            return None
        return str(ti.typeof(out)), ti.to_numpy(out)


B = np.arange(64.0, dtype=np.float32).reshape(8, 8) / 7
OPS = {
    "matmul": (lambda a, b: a @ b),
    "add": (lambda a, b: a + b),
    "einsum": (lambda a, b: (jnp if isinstance(a, jax.Array) else torch).einsum("ij,jk->ik", a, b)),
}
PAIRS = [
    (P("data", "model"), P("data", "model")),   # contracting ('model',) vs ('data',)
    (P(None, "model"), P("model", None)),       # contracting sharded on both sides
    (P("data", None), P(None, "model")),        # well typed everywhere
    (P("data", "model"), P("model", None)),     # add: conflicting specs
    (P("data", None), P("data", None)),
]


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("types", [None, "auto", ("explicit", "auto"), ("auto", "explicit")])
def test_explicit_axes_refuse_where_jax_refuses(sim8, op, types):
    for specs in PAIRS:
        theirs = _jax_outcome(OPS[op], [DATA, B], specs, types)
        ours = _torch_outcome(OPS[op], [DATA, B], specs, types)
        assert (theirs is None) == (ours is None), (op, specs, theirs, ours)
        if theirs is not None:
            assert ours[0] == theirs[0], (op, specs)
            np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-6, atol=1e-4)
    if types == "auto":  # Auto axes: nothing refused (today's behaviour)
        assert all(_torch_outcome(OPS[op], [DATA, B], s, types) is not None for s in PAIRS)


def test_auto_axes_and_explicit_axes_as_jax(sim8):
    seen = {"jax": [], "torch": []}

    def inside(backend, key):
        def f(a, b):
            seen[key].append(str(backend.typeof(a)))
            return a @ b
        return f

    with jax_ref.set_mesh(jax_mesh()):
        jx = jax_ref.device_put(DATA, P("data", "model"))
        jy = jax_ref.auto_axes(inside(jax_ref, "jax"), out_sharding=P("data", None))(jx, jx)
        jm = jax_ref.auto_axes(lambda a, b: a @ b, axes="model",
                               out_sharding=P("data", None))(jx, jx)
    with ti.set_mesh(torch_mesh()), ti.jax_semantics():
        x = ti.device_put(DATA, P("data", "model"))
        y = ti.auto_axes(inside(ti, "torch"), out_sharding=P("data", None))(x, x)
        m = ti.auto_axes(lambda a, b: a @ b, axes="model", out_sharding=P("data", None))(x, x)
    assert seen["torch"] == seen["jax"] == ["float32[8,8]"]
    for ours, theirs in ((y, jy), (m, jm)):
        assert str(ti.typeof(ours)) == str(jax.typeof(theirs)) == "float32[8@data,8]"
        np.testing.assert_allclose(ti.to_numpy(ours), np.asarray(theirs), rtol=1e-6)

    def typed(backend, key, error):
        def g(a):
            seen[key].append(str(backend.typeof(a)))
            with pytest.raises(error):
                a @ a
            return a
        return g

    with jax_ref.set_mesh(jax_mesh("auto")):
        jz = jax_ref.explicit_axes(typed(jax_ref, "jax", JaxShardingTypeError),
                                   in_sharding=P("data", "model"))(jax_ref.device_put(DATA, P()))
    with ti.set_mesh(torch_mesh("auto")), ti.jax_semantics():
        z = ti.explicit_axes(typed(ti, "torch", parity.ShardingTypeError),
                             in_sharding=P("data", "model"))(ti.device_put(DATA, P()))
    assert seen["torch"][1:] == seen["jax"][1:] == ["float32[8@data,8@model]"]
    assert str(ti.typeof(z)) == str(jax.typeof(jz)) == "float32[8,8]"


def test_out_sharding_types_the_contraction_jax_refuses_bare(sim8):
    """``matmul(a, b, out_sharding=P(...))`` where ``a @ b`` is refused
    (contracting dim sharded on both sides): JAX's type and value on both
    backends; an ``out_sharding`` that is not a spec, or a ``P`` with no
    ambient mesh, is a ``LayoutError``."""
    w = DATA.T.copy()
    with jax_ref.set_mesh(jax_mesh()):
        ja, jb = jax_ref.device_put(DATA, P("data", "model")), jax_ref.device_put(w, P("model"))
        with pytest.raises(JaxShardingTypeError):
            ja @ jb
        theirs = jax_ref.matmul(ja, jb, out_sharding=P(None, "model"))
    with ti.set_mesh(torch_mesh()), ti.jax_semantics():
        a, b = ti.device_put(DATA, P("data", "model")), ti.device_put(w, P("model"))
        with pytest.raises(parity.ShardingTypeError):
            a @ b
        ours = ti.matmul(a, b, out_sharding=P(None, "model"))
        with pytest.raises(parity.LayoutError, match="out_sharding"):
            ti.matmul(a, b, out_sharding=("data", None))
    assert str(ti.typeof(ours)) == str(jax.typeof(theirs)) == "float32[8,8@model]"
    np.testing.assert_allclose(ti.to_numpy(ours), np.asarray(theirs), rtol=1e-6)
    with pytest.raises(parity.LayoutError, match="ambient mesh"):
        ti.einsum("ij,jk->ik", torch.ones(2, 2), torch.ones(2, 2), out_sharding=P())


def test_unreduced_values_as_jax(sim8):
    """``P(..., unreduced=)``: a contraction whose sum stays pending
    (``out_sharding``), reshard into and out of unreduced, the linear ops
    that keep it and the ops JAX refuses on it -- ``typeof`` strings, values
    and gradients' types equal to JAX's on both backends."""
    x_host, w_host = DATA, (DATA.T / 10).copy()
    um = P("data", None, unreduced={"model"})

    def program(B, x, w):
        y = B.matmul(x, w, out_sharding=um)
        z = B.reshard(x * 1.0, um)
        types = [B.typeof(y), B.typeof(y + y), B.typeof(z), B.typeof(z.sum(1)),
                 B.typeof(B.reshard(z, P(None, None, unreduced={"model"})))]
        return [str(t) for t in types], B.reshard(y + y, P("data", None)), B.reshard(z, P())

    with jax_ref.set_mesh(jax_mesh()):
        jx = jax_ref.device_put(x_host, P("data", "model"))
        jw = jax_ref.device_put(w_host, P("model", None))
        j_types, j_out, j_back = program(jax_ref, jx, jw)
        j_grads = jax.grad(lambda x, w: jnp.sum(program(jax_ref, x, w)[1]), argnums=(0, 1))(jx, jw)
        jy = jax_ref.reshard(jx, um)
        for refused in (lambda: jy * 2.0, lambda: jy + jx, lambda: jy @ jw):
            with pytest.raises(JaxShardingTypeError):
                refused()
        with pytest.raises(JaxShardingTypeError, match="unreduced axes should be equal"):
            jax_ref.matmul(jx, jw, out_sharding=P(None, None, unreduced={"data"}))
    with ti.set_mesh(torch_mesh()), ti.jax_semantics():
        tx = ti.device_put(x_host, P("data", "model")).requires_grad_(True)
        tw = ti.device_put(w_host, P("model", None)).requires_grad_(True)
        t_types, t_out, t_back = program(ti, tx, tw)
        t_out.sum().backward()
        ty = ti.reshard(tx, um)
        for refused in (lambda: ty * 2.0, lambda: ty + tx, lambda: ty @ tw, lambda: torch.sin(ty)):
            with pytest.raises(parity.ShardingTypeError, match="reshard"):
                refused()
        with pytest.raises(parity.ShardingTypeError, match="unreduced axes should be equal"):
            ti.matmul(tx, tw, out_sharding=P(None, None, unreduced={"data"}))
        with pytest.raises(parity.UnsupportedOpError, match="unreduced"):
            ti.with_sharding_constraint(ty, P("data", None))
    assert t_types == j_types == [
        "float32[8@data,8]{U:model}", "float32[8@data,8]{U:model}",
        "float32[8@data,8]{U:model}", "float32[8@data]{U:model}", "float32[8,8]{U:model}"]
    np.testing.assert_allclose(ti.to_numpy(t_out), np.asarray(j_out), rtol=1e-5)
    np.testing.assert_allclose(ti.to_numpy(t_back), np.asarray(j_back), rtol=1e-6)
    assert [str(ti.typeof(g)) for g in (tx.grad, tw.grad)] == [str(jax.typeof(g)) for g in j_grads]
    np.testing.assert_allclose(ti.to_numpy(tx.grad), np.asarray(j_grads[0]), rtol=1e-5)
    np.testing.assert_allclose(ti.to_numpy(tw.grad), np.asarray(j_grads[1]), rtol=1e-5)


def test_the_unreduced_check_waits_for_the_first_unreduced_value(sim8, monkeypatch):
    """Until the process makes an ``Unreduced`` placement no operand can hold
    one, and the mode's check reads no operand's placements (under
    ``torch.compile`` dynamo traced that walk per operand, per op); the
    first one made turns the check on, and JAX's rules apply to it."""
    from parity.torch_impl.semantics import fast_path, unreduced

    monkeypatch.setattr(unreduced, "_made", False)
    looked_at = []
    real = unreduced.unreduced_axes
    monkeypatch.setattr(unreduced, "unreduced_axes", lambda x: looked_at.append(x) or real(x))
    fast_path.forget_all()  # every op below takes the whole rule
    with ti.set_mesh(torch_mesh()), ti.jax_semantics():
        x = ti.device_put(DATA, P("data", "model"))
        np.testing.assert_allclose(ti.to_numpy(x * 3.0 + x), DATA * 4.0)
        assert looked_at == []
        z = ti.reshard(x * 1.0, P("data", None, unreduced={"model"}))
        assert unreduced._made
        with pytest.raises(parity.ShardingTypeError, match="reshard"):
            z * 2.0
        assert looked_at


def test_shard_map_refuses_unreduced_specs(sim8):
    """A ``shard_map`` spec with ``unreduced=`` is refused, never dropped."""
    with ti.set_mesh(torch_mesh()), ti.jax_semantics():
        x = ti.device_put(DATA, P("data", "model"))
        with pytest.raises(parity.UnsupportedOpError, match="unreduced"):
            ti.shard_map(lambda b: b, in_specs=P("data", None, unreduced={"model"}),
                         out_specs=P("data", "model"))(x)
