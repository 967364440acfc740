"""What a JAX user ports (``docs/from-jax.md``), checked against JAX 0.10.2
itself on 8 simulated devices: ``set_mesh`` as a call and as a ``with``,
JAX's dtypes for host data (64-bit off unless ``JAX_ENABLE_X64``),
``NamedSharding(mesh, P(...))`` as ``parity.TensorLayout(P(...), mesh)``,
``x.sharding`` / ``np.asarray`` / ``jax.device_get``, and ``jax.grad`` /
``jax.jit`` as torch autograd / ``torch.compile``."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import sequential_collectives
import torch

import parity
from parity import P, jax_ref

jax_ref.simulate(8)

import jax  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as JaxP  # noqa: E402

from parity import torch_impl as ti  # noqa: E402

DATA64 = np.arange(64.0).reshape(8, 8) / 8 - 3.5  # float64, as np.arange(64.) gives


def _mesh(backend, axis_types=None):
    devices = jax_ref.list_devices() if backend is jax_ref else None
    return parity.make_mesh((2, 4), ("data", "model"), axis_types=axis_types, devices=devices)


@pytest.fixture
def no_mesh():
    """Every test starts and ends with no ambient mesh (a plain ``set_mesh``
    call lasts past the test otherwise)."""
    jax_ref.set_mesh(None)
    yield
    jax_ref.set_mesh(None)


# ------------------------------------------------------------------ set_mesh

def _jax_states(set_mesh, meshes, current):
    """The ambient mesh after each step of one sequence of ``set_mesh``
    calls and blocks, as the name of the mesh (``None`` for none)."""
    m1, m2 = meshes
    seen = []
    set_mesh(m1)                             # plain call: set
    seen.append(current())
    with set_mesh(m2):                       # block: set, then restore m1
        seen.append(current())
        set_mesh(m1)                         # a plain call inside the block ...
        seen.append(current())
    seen.append(current())                   # ... is undone by the block's exit
    held = set_mesh(m2)                      # the call sets it even before `with`
    seen.append(current())
    with held:
        pass
    seen.append(current())                   # exit restores what the call replaced
    set_mesh(None)                           # clears
    seen.append(current())
    return seen


def test_set_mesh_as_a_call_and_a_block_behaves_as_jax_set_mesh(sim8, no_mesh):
    """The same sequence of calls and blocks gives the same ambient mesh
    after every step with ``jax.set_mesh``, ``jax_ref.set_mesh`` (both
    parity's and JAX's ambient mesh) and ``torch_impl.set_mesh``."""
    jm = (jax.make_mesh((2, 4), ("data", "model")), jax.make_mesh((8,), ("x",)))
    names = {jm[0].abstract_mesh: "m1", jm[1].abstract_mesh: "m2"}
    jax.set_mesh(None)
    want = _jax_states(jax.set_mesh, jm,
                       lambda: names.get(jax.sharding.get_abstract_mesh()))
    assert want == ["m1", "m2", "m1", "m1", "m2", "m1", None]

    for backend in (jax_ref, ti):
        devices = jax_ref.list_devices() if backend is jax_ref else None
        pm = (_mesh(backend), parity.make_mesh((8,), ("x",), devices=devices))
        label = {pm[0]: "m1", pm[1]: "m2"}
        got = _jax_states(backend.set_mesh, pm, lambda: label.get(parity.ambient.get_mesh()))
        assert got == want, backend.__name__
    jax_names = []
    got = _jax_states(jax_ref.set_mesh, (_mesh(jax_ref), parity.make_mesh(
        (8,), ("x",), devices=jax_ref.list_devices())),
        lambda: jax_names.append(names.get(jax.sharding.get_abstract_mesh())))
    assert jax_names == want  # jax_ref sets JAX's own ambient mesh with parity's


def test_a_plain_set_mesh_call_lets_p_resolve_as_in_jax(sim8, no_mesh):
    """After ``set_mesh(mesh)`` (no ``with``), ``device_put(x, P(...))``
    resolves on that mesh: JAX's type on both backends."""
    jax.set_mesh(jax.make_mesh((2, 4), ("data", "model")))
    want = str(jax.typeof(jax.device_put(DATA64, JaxP("data", "model"))))
    jax.set_mesh(None)
    for backend in (jax_ref, ti):
        backend.set_mesh(_mesh(backend))
        assert str(backend.typeof(backend.device_put(DATA64, P("data", "model")))) == want
        backend.set_mesh(None)
    assert want == "float32[8@data,8@model]"


def test_set_mesh_called_in_a_thread_stays_in_that_thread(sim8, no_mesh):
    """``jax.set_mesh`` sets the calling thread's mesh (JAX's thread-local
    config); parity's ``set_mesh`` does the same."""
    jmesh, pmesh = jax.make_mesh((8,), ("x",)), parity.make_mesh((8,), ("x",))
    in_thread = []

    def worker():
        jax.set_mesh(jmesh)
        ti.set_mesh(pmesh)
        in_thread.append((jax.sharding.get_abstract_mesh() == jmesh.abstract_mesh,
                          parity.ambient.get_mesh() is pmesh))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert in_thread == [(True, True)]
    assert jax.sharding.get_abstract_mesh().empty and parity.ambient.get_mesh() is None


def test_set_mesh_refuses_what_jax_refuses(no_mesh):
    """A mesh with Manual axes: JAX's ``ValueError``, parity's
    ``LayoutError`` (a ``ValueError``); a value that is no mesh:
    ``LayoutError`` naming it. Neither changes the ambient mesh."""
    devices = [f"cpu:{i}" for i in range(8)]
    manual = parity.make_mesh((8,), ("x",), axis_types="manual", devices=devices)
    with pytest.raises(ValueError, match="manual axes"):
        jax.set_mesh(jax.make_mesh((8,), ("x",), axis_types=(jax.sharding.AxisType.Manual,)))
    for backend in (jax_ref, ti):
        with pytest.raises(parity.LayoutError, match="Manual axes") as caught:
            backend.set_mesh(manual)
        assert caught.value.what == "mesh"
        with pytest.raises(parity.LayoutError, match="got str: 'data'"):
            backend.set_mesh("data")
        assert parity.ambient.get_mesh() is None
    assert jax.sharding.get_abstract_mesh().empty


# -------------------------------------------------------------------- dtypes

HOST_INPUTS = [
    ("float64 array", lambda: DATA64),
    ("int64 array", lambda: np.arange(64).reshape(8, 8)),
    ("uint64 array", lambda: np.arange(64, dtype=np.uint64).reshape(8, 8)),
    ("complex128 array", lambda: DATA64 * (1 + 1j)),
    ("list of floats", lambda: DATA64.tolist()),
    ("list of ints", lambda: np.arange(64).reshape(8, 8).tolist()),
    ("float16 array", lambda: DATA64.astype(np.float16)),
    ("int8 array", lambda: np.arange(64, dtype=np.int8).reshape(8, 8)),
]


@pytest.mark.parametrize("name,make", HOST_INPUTS, ids=[n for n, _ in HOST_INPUTS])
def test_host_data_gets_jax_dtypes_on_both_backends(sim8, no_mesh, name, make):
    """``jax.device_put`` of host data with 64-bit types off (JAX's
    default): float64 -> float32, complex128 -> complex64; narrower dtypes
    stay. Every entry point of both backends gives JAX's floating dtype, and
    ``typeof`` and the values agree. Integers: JAX narrows int64 to int32;
    torch_impl keeps the host's width (torch's index ops require int64),
    with the same values."""
    jmesh = jax.make_mesh((2, 4), ("data", "model"))
    # JAX takes a list as a pytree of scalars: a JAX user writes np.asarray(list)
    ref = jax.device_put(np.asarray(make()), NamedSharding(jmesh, JaxP("data", "model")))
    for backend in (jax_ref, ti):
        mesh = _mesh(backend)
        layout = parity.TensorLayout(("data", "model"), mesh)
        with backend.set_mesh(mesh):
            made = {"distribute_tensor": backend.distribute_tensor(make(), layout),
                    "distribute_variable": backend.distribute_variable(make(), layout),
                    "distribute_data_input": backend.distribute_data_input(make(), layout),
                    "device_put": backend.device_put(make(), P("data", "model"))}
        expected = ref.dtype
        if backend is ti and ref.dtype.kind in "iu":
            expected = np.asarray(make()).dtype  # integers keep their width on torch
        for how, x in made.items():
            where = f"{backend.__name__}.{how}({name})"
            assert backend.describe(x).dtype == str(expected), where
            assert str(backend.typeof(x)) == str(jax.typeof(ref)).replace(
                str(ref.dtype), str(expected)), where
            got = backend.to_numpy(x.detach() if isinstance(x, torch.Tensor) else x)
            assert got.dtype == expected, where
            np.testing.assert_array_equal(got, np.asarray(ref), err_msg=where)


def test_a_python_scalar_gets_jax_dtype(sim8, no_mesh):
    """``device_put(2.5, P())`` / ``device_put(3, P())``: float32 / int32 in
    JAX; torch_impl: float32 / int64 (integers keep numpy's width)."""
    for value, dtype, torch_dtype in ((2.5, "float32", "float32"), (3, "int32", "int64")):
        assert str(jax.device_put(value).dtype) == dtype
        for backend, want in ((jax_ref, dtype), (ti, torch_dtype)):
            with backend.set_mesh(_mesh(backend)):
                assert backend.describe(backend.device_put(value, P())).dtype == want


def test_torch_tensors_keep_their_dtype(sim8, no_mesh):
    """A torch tensor or DTensor the user made in float64 stays float64:
    only host data is converted."""
    mesh = _mesh(ti)
    layout = parity.TensorLayout(("data", "model"), mesh)
    plain = torch.from_numpy(DATA64)
    assert plain.dtype == torch.float64
    x = ti.distribute_tensor(plain, layout)
    assert ti.describe(x).dtype == "float64"
    assert ti.describe(ti.distribute_tensor(x, parity.TensorLayout(("model", None), mesh))).dtype \
        == "float64"
    assert ti.distribute_variable(plain, layout).dtype == torch.float64
    with ti.set_mesh(mesh):
        assert str(ti.typeof(ti.device_put(plain, P("data", None)))) == "float64[8@data,8]"
        assert str(ti.typeof(ti.reshard(x, P(None, "model")))) == "float64[8,8@model]"


def test_jax_enable_x64_keeps_64_bit_host_data_on_both_backends(sim8, no_mesh, monkeypatch):
    """``JAX_ENABLE_X64=1`` (JAX's switch; here set as the environment
    variable for torch_impl and as the config JAX reads it into): float64
    and int64 host data stay 64-bit on both backends, as in JAX."""
    monkeypatch.setenv("JAX_ENABLE_X64", "1")
    jax.config.update("jax_enable_x64", True)
    try:
        jmesh = jax.make_mesh((2, 4), ("data", "model"))
        for host in (DATA64, np.arange(64).reshape(8, 8)):
            ref = jax.device_put(host, NamedSharding(jmesh, JaxP("data", None)))
            assert ref.dtype == host.dtype
            for backend in (jax_ref, ti):
                layout = parity.TensorLayout(("data", None), _mesh(backend))
                assert backend.describe(backend.distribute_tensor(host, layout)).dtype == \
                    str(ref.dtype)
    finally:
        jax.config.update("jax_enable_x64", False)
    monkeypatch.setenv("JAX_ENABLE_X64", "off")
    layout = parity.TensorLayout(("data", None), _mesh(ti))
    assert ti.describe(ti.distribute_tensor(DATA64, layout)).dtype == "float32"


def test_a_bad_jax_enable_x64_value_is_refused(sim8, monkeypatch):
    """JAX refuses ``JAX_ENABLE_X64=maybe`` at import (``ValueError``);
    torch_impl at the call, with a ``ParityError`` naming the value."""
    monkeypatch.setenv("JAX_ENABLE_X64", "maybe")
    layout = parity.TensorLayout(("data", None), _mesh(ti))
    with pytest.raises(parity.ParityError, match="JAX_ENABLE_X64='maybe' is not a truth value"):
        ti.distribute_tensor(DATA64, layout)


# ----------------------------------------------------- NamedSharding -> layout

def test_tensor_layout_takes_a_partition_spec_as_named_sharding_does(sim8, no_mesh):
    """``parity.TensorLayout(P(...), mesh)`` is ``NamedSharding(mesh,
    P(...))``: the same layout as the tuple form, and the same placement as
    JAX's on both backends."""
    jmesh = jax.make_mesh((2, 4), ("data", "model"))
    ref = jax.device_put(DATA64, NamedSharding(jmesh, JaxP("model", None)))
    for backend in (jax_ref, ti):
        mesh = _mesh(backend)
        layout = parity.TensorLayout(P("model", None), mesh)
        assert layout == parity.TensorLayout(("model", None), mesh)
        assert parity.TensorLayout(P(("data", "model")), mesh).spec == (("data", "model"),)
        x = backend.distribute_tensor(DATA64, layout)
        assert backend.describe(x) == jax_ref.describe(ref)
        assert str(backend.typeof(x)) == str(jax.typeof(ref)) == "float32[8@model,8]"


def test_tensor_layout_refuses_an_unreduced_spec_and_a_non_mesh(no_mesh):
    devices = [f"cpu:{i}" for i in range(8)]
    mesh = parity.make_mesh((2, 4), ("data", "model"), devices=devices)
    with pytest.raises(parity.LayoutError, match=r"unreduced=.*Fix") as caught:
        parity.TensorLayout(P("data", unreduced={"model"}), mesh)
    assert caught.value.what == "unreduced"
    for wrong in ("mesh", jax.make_mesh((2, 4), ("data", "model")), (2, 4)):
        with pytest.raises(parity.LayoutError, match="device_mesh must be a parity.DeviceMesh") \
                as caught:
            parity.TensorLayout(("data", None), wrong)
        assert caught.value.what == "device_mesh" and caught.value.value is wrong
        assert repr(wrong)[:20] in str(caught.value)


# ------------------------------------- x.sharding, np.asarray, jax.device_get

def test_sharding_and_host_copies_as_in_jax(sim8, no_mesh):
    """``x.sharding.spec`` -> ``describe(x).spec``; ``jax.typeof(x)`` ->
    ``typeof(x)``; ``np.asarray(x)`` / ``jax.device_get(x)`` ->
    ``to_numpy(x)``, or ``np.asarray(x)`` under ``jax_semantics()``
    (outside it, torch's ``RuntimeError``)."""
    jax.set_mesh(jax.make_mesh((2, 4), ("data", "model")))
    ref = jax.device_put(DATA64, JaxP(("data", "model"), None))
    jax.set_mesh(None)
    assert ref.sharding.spec == JaxP(("data", "model"), None)
    for backend in (jax_ref, ti):
        with backend.set_mesh(_mesh(backend)):
            x = backend.device_put(DATA64, P(("data", "model"), None))
        assert backend.describe(x).spec == (("data", "model"), ())
        assert str(backend.typeof(x)) == str(jax.typeof(ref))
        np.testing.assert_array_equal(backend.to_numpy(x), jax.device_get(ref))
        np.testing.assert_array_equal(backend.to_numpy(x), np.asarray(ref))
    with ti.jax_semantics():
        np.testing.assert_array_equal(np.asarray(x), np.asarray(ref))
    with pytest.raises(RuntimeError, match="not supported for tensor subclasses"):
        np.asarray(x)  # outside jax_semantics(): torch's own refusal


# ------------------------------------------------ jax.grad / jax.jit on torch

X = np.linspace(-1.0, 1.0, 64).reshape(8, 8)
W = np.linspace(1.0, -1.0, 64).reshape(8, 8) / 4


def _jax_value_and_grad(jit: bool):
    """``jax.value_and_grad`` of ``sum(tanh(x @ w))`` in ``w`` on Explicit
    axes: the loss, the gradient's values and its type."""
    mesh = _mesh(jax_ref)
    with jax_ref.set_mesh(mesh):
        x = jax_ref.device_put(X, P("data", None))
        w = jax_ref.device_put(W, P(None, "model"))
        fn = jax.value_and_grad(lambda w: jax.numpy.tanh(x @ w).sum())
        loss, grad = (jax.jit(fn) if jit else fn)(w)
        return float(loss), np.asarray(grad), str(jax.typeof(grad))


def _torch_value_and_grad(step):
    with ti.set_mesh(_mesh(ti)), ti.jax_semantics():
        x = ti.device_put(X, P("data", None))
        w = ti.device_put(W, P(None, "model")).requires_grad_()
        loss = step(x, w)
        loss.backward()
        return (float(ti.to_numpy(loss.detach())), ti.to_numpy(w.grad), str(ti.typeof(w.grad)))


def _loss(x, w):
    return torch.tanh(x @ w).sum()


def test_torch_autograd_gives_jax_value_and_grad(sim8, no_mesh):
    """``jax.value_and_grad`` -> ``loss.backward()`` under
    ``jax_semantics()``: the same loss, gradient values and gradient type
    (``w``'s own sharding)."""
    want = _jax_value_and_grad(jit=False)
    got = _torch_value_and_grad(_loss)
    assert got[2] == want[2] == "float32[8,8@model]"
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # dynamo and AOTAutograd trace the forward and the backward
def test_torch_compile_over_simulated_ranks_gives_jax_jit(sim8, no_mesh):
    """``jax.jit(jax.value_and_grad(f))`` -> ``torch.compile(f,
    fullgraph=True)`` and ``backward()`` over 8 simulated ranks under
    ``jax_semantics()``: it traces, and gives ``jax.jit``'s loss, gradient
    values and gradient type."""
    want = _jax_value_and_grad(jit=True)
    torch._dynamo.reset()
    # compiled, the loss's sum over both axes is one all_reduce per mesh axis
    # (no flattened mesh can be made while dynamo traces; DTensor logs it)
    with sequential_collectives.collected():
        got = _torch_value_and_grad(torch.compile(_loss, fullgraph=True, backend="aot_eager"))
    assert got[2] == want[2] == "float32[8,8@model]"
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
