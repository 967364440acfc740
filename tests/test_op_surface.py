"""The op surface under ``jax_semantics()`` (issue 11): every op gives the
value of the op on the unsharded tensors, and every floating input's
gradient has that input's placement -- through rules, the fallback
(``parity.torch_impl.semantics.fallback``) and the gradient guard. Each test
is a case that plain DTensor (or parity before the fix) gets wrong."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import parity
from parity import torch_impl as ti

L = parity.TensorLayout


@pytest.fixture
def mesh(sim8):
    return parity.DeviceMesh((2, 4), ("data", "model"))


def host(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def put(array, spec, mesh, grad=False):
    x = ti.distribute_tensor(np.asarray(array, np.float32), L(spec, mesh))
    return x.requires_grad_() if grad else x


def plain(array, grad=False):
    return torch.tensor(np.asarray(array, np.float32), requires_grad=grad)


def assert_grad_placed(x, expected):
    assert x.grad is not None
    assert tuple(x.grad.placements) == tuple(x.placements)
    np.testing.assert_allclose(ti.to_numpy(x.grad), expected, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------ wrong values

def test_conv1d_over_a_sharded_spatial_dim_gives_the_unsharded_value(mesh):
    a, w = host((1, 3, 8)), host((3, 3, 3), 1)
    x = put(a, (None, None, "model"), mesh, grad=True)
    with ti.jax_semantics():
        y = F.conv1d(x, put(w, (None, None, None), mesh), stride=2, padding=2)
        y.sum().backward()
    ref_x = plain(a, grad=True)
    ref = F.conv1d(ref_x, plain(w), stride=2, padding=2)
    ref.sum().backward()
    np.testing.assert_allclose(ti.to_numpy(y), ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    assert_grad_placed(x, ref_x.grad.numpy())


def test_conv2d_keeps_the_batch_dim_sharded(mesh):
    a, w = host((4, 2, 8, 8)), host((3, 2, 3, 3), 1)
    with ti.jax_semantics():
        y = F.conv2d(put(a, ("data", None, "model", None), mesh), put(w, (None,) * 4, mesh))
    np.testing.assert_allclose(ti.to_numpy(y), F.conv2d(plain(a), plain(w)).numpy(),
                               rtol=1e-5, atol=1e-5)
    assert ti.describe(y).spec == (("data",), (), (), ())


def test_amax_gradient_when_the_maximum_is_not_in_the_first_shard(mesh):
    a = np.arange(8, dtype=np.float32)  # the maximum is on the last shard
    x = put(a, ("data",), mesh, grad=True)
    with ti.jax_semantics():
        torch.amax(x, 0).backward()
    expected = np.zeros(8, np.float32)
    expected[-1] = 1
    assert_grad_placed(x, expected)


def test_eig_gradient_with_a_sharded_batch_dim_is_not_nan(mesh):
    a = host((2, 3, 3), 3) + 3 * np.eye(3, dtype=np.float32)
    x = put(a, ("data", None, None), mesh, grad=True)
    with ti.jax_semantics():
        torch.linalg.eigvals(x).abs().sum().backward()
    ref_x = plain(a, grad=True)
    torch.linalg.eigvals(ref_x).abs().sum().backward()
    assert_grad_placed(x, ref_x.grad.numpy())


# ------------------------------------------------------------ gradient placement

@pytest.mark.parametrize("prop", ["T", "mT", "H", "mH"])
def test_transpose_property_gradient_has_the_input_placement(mesh, prop):
    a = host((4, 8))
    x = put(a, ("data", "model"), mesh, grad=True)
    with ti.jax_semantics():
        y = getattr(x, prop)
        (y * 2).sum().backward()
    assert ti.describe(y).spec == (("model",), ("data",))
    assert_grad_placed(x, np.full((4, 8), 2, np.float32))


@pytest.mark.parametrize("op", [torch.sgn, torch.sign, lambda t: t.repeat(0)],
                         ids=["sgn", "sign", "repeat0"])
def test_zero_or_empty_gradient_reaches_the_leaf_with_its_placement(mesh, op):
    x = put(np.arange(8) - 3.0, ("data",), mesh, grad=True)
    with ti.jax_semantics():
        op(x).sum().backward()
    assert_grad_placed(x, np.zeros(8, np.float32))


def test_max_pool_with_indices_gradient(mesh):
    a = host((2, 4, 4, 4))
    x = put(a, ("data", "model", None, None), mesh, grad=True)
    with ti.jax_semantics():
        values, indices = F.max_pool2d(x, 2, return_indices=True)
        values.sum().backward()
    ref_x = plain(a, grad=True)
    ref, ref_indices = F.max_pool2d(ref_x, 2, return_indices=True)
    ref.sum().backward()
    np.testing.assert_array_equal(ti.to_numpy(indices), ref_indices.numpy())
    assert_grad_placed(x, ref_x.grad.numpy())


# ------------------------------------------------------------ the fallback

def test_data_dependent_output_size_runs_on_the_gathered_values(mesh):
    a = np.arange(8, dtype=np.float32) - 3
    x = put(a, ("data",), mesh, grad=True)
    with ti.jax_semantics():
        y = torch.masked_select(x, x > 0)
        y.sum().backward()
    np.testing.assert_array_equal(ti.to_numpy(y), a[a > 0])
    assert_grad_placed(x, (a > 0).astype(np.float32))


def test_op_without_a_dtensor_strategy_runs_on_the_gathered_values(mesh):
    a, src = host((4, 8)), host((4, 8), 1)
    index = np.random.default_rng(2).integers(0, 4, (4, 8))
    with ti.jax_semantics():
        y = put(a, ("data", "model"), mesh).scatter_reduce(
            0, torch.tensor(index), put(src, ("data", "model"), mesh), "sum")
    ref = plain(a).scatter_reduce(0, torch.tensor(index), plain(src), "sum")
    np.testing.assert_allclose(ti.to_numpy(y), ref.numpy(), rtol=1e-5, atol=1e-5)


def test_in_place_op_without_a_strategy_on_a_sharded_operand_is_refused(mesh):
    x = put(host((4, 8)), ("data", "model"), mesh)
    index = torch.zeros(4, 8, dtype=torch.long)
    with ti.jax_semantics(), pytest.raises(parity.UnsupportedOpError, match="scatter_reduce_") as info:
        x.scatter_reduce_(0, index, put(host((4, 8), 1), ("data", "model"), mesh), "sum")
    assert info.value.op.endswith("scatter_reduce_") and info.value.reason
    assert tuple(x.placements) in info.value.placements


def test_attention_with_sharded_heads_gives_the_unsharded_value(mesh):
    q, k, v = host((2, 4, 8, 8), 0), host((2, 4, 8, 8), 1), host((2, 4, 8, 8), 2)
    spec = ("data", "model", None, None)
    with ti.jax_semantics():
        y = F.scaled_dot_product_attention(put(q, spec, mesh), put(k, spec, mesh),
                                           put(v, spec, mesh))
    ref = F.scaled_dot_product_attention(plain(q), plain(k), plain(v))
    np.testing.assert_allclose(ti.to_numpy(y), ref.numpy(), rtol=1e-5, atol=1e-5)


def test_slice_scatter_gradient(mesh):
    a, b = host((4, 8)), host((4, 4), 1)
    x = put(a, ("data", "model"), mesh, grad=True)
    with ti.jax_semantics():
        torch.slice_scatter(x, put(b, ("data", None), mesh), 1, 0, 4).sum().backward()
    expected = np.ones((4, 8), np.float32)
    expected[:, :4] = 0
    assert_grad_placed(x, expected)


# ------------------------------------------------------------ known-wrong strategies

def test_quantile_with_a_0d_q_keeps_the_0d_shape(mesh):
    a = host((8,))
    with ti.jax_semantics():
        y = torch.quantile(put(a, ("data",), mesh), torch.tensor(0.25))
    ref = torch.quantile(plain(a), torch.tensor(0.25))
    assert tuple(y.shape) == tuple(ref.shape) == ()
    np.testing.assert_allclose(ti.to_numpy(y), ref.numpy(), rtol=1e-5)


@pytest.mark.parametrize("loss", [F.mse_loss, F.smooth_l1_loss, F.soft_margin_loss],
                         ids=["mse", "smooth_l1", "soft_margin"])
def test_loss_gradient_over_sharded_inputs(mesh, loss):
    a, b = host((8,)), np.sign(host((8,), 1))
    x = put(a, ("data",), mesh, grad=True)
    with ti.jax_semantics():
        loss(x, put(b, ("data",), mesh)).backward()
    ref_x = plain(a, grad=True)
    loss(ref_x, plain(b)).backward()
    assert_grad_placed(x, ref_x.grad.numpy())


def test_cosine_embedding_loss_over_a_sharded_feature_dim(mesh):
    a, b, t = host((4, 8)), host((4, 8), 1), np.array([1, -1, 1, -1], np.float32)
    spec = (None, "model")
    with ti.jax_semantics():
        y = F.cosine_embedding_loss(put(a, spec, mesh), put(b, spec, mesh),
                                    put(t, ("model",), mesh))
    ref = F.cosine_embedding_loss(plain(a), plain(b), plain(t))
    np.testing.assert_allclose(ti.to_numpy(y), ref.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", [lambda t: F.avg_pool2d(t, 2), F.hardshrink, F.relu6],
                         ids=["avg_pool2d", "hardshrink", "relu6"])
def test_op_whose_backward_has_no_dtensor_strategy(mesh, op):
    a = host((2, 4, 4, 4))
    x = put(a, ("data", "model", None, None), mesh, grad=True)
    with ti.jax_semantics():
        y = op(x)
        y.sum().backward()
    ref_x = plain(a, grad=True)
    op(ref_x).sum().backward()
    np.testing.assert_allclose(ti.to_numpy(y), op(plain(a)).detach().numpy(), rtol=1e-5)
    assert_grad_placed(x, ref_x.grad.numpy())


def test_cummax_gradient_over_a_sharded_dim(mesh):
    a = host((4, 8))
    x = put(a, ("data", "model"), mesh, grad=True)
    with ti.jax_semantics():
        torch.cummax(x, 1).values.sum().backward()
    ref_x = plain(a, grad=True)
    torch.cummax(ref_x, 1).values.sum().backward()
    assert_grad_placed(x, ref_x.grad.numpy())


@pytest.mark.parametrize("reduce", ["sum", "max", "mean", "prod", "min"])
@pytest.mark.parametrize("segments", [{"lengths": [2, 0, 3, 3]}, {"offsets": [0, 2, 2, 5, 8]},
                                      {"lengths": [2, 0, 3, 3], "initial": 1.0}],
                         ids=["lengths", "offsets", "initial"])
def test_segment_reduce_over_a_sharded_dim_and_its_gradient(mesh, reduce, segments):
    # JAX answers (jax.ops.segment_sum / segment_max); parity gathers and
    # runs it (DTensor has no strategy); empty segments included
    a = host((8, 4))
    kwargs = {k: torch.tensor(v) if isinstance(v, list) else v for k, v in segments.items()}
    x = put(a, (("data", "model"), None), mesh, grad=True)
    with ti.jax_semantics():
        y = torch.segment_reduce(x, reduce, **kwargs)
        y.sum().backward()
    ref_x = plain(a, grad=True)
    ref = torch.segment_reduce(ref_x, reduce, **kwargs)
    ref.sum().backward()
    np.testing.assert_allclose(ti.to_numpy(y), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert_grad_placed(x, ref_x.grad.numpy())


def test_tensordot_contracting_a_size_one_dim_against_a_longer_one(mesh):
    # torch broadcasts a contracted dim of size 1 (JAX refuses it); einsum
    # on the blocks raised a raw "NYI" (an OpInfo sample): torch's value
    a, b = host((1, 1, 1)), host((2, 1, 2), 1)
    x, y = put(a, (None, None, None), mesh), put(b, ("data", None, None), mesh)
    with ti.jax_semantics():
        out = torch.tensordot(x, y, dims=([0, 1], [2, 0]))
    expected = torch.tensordot(plain(a), plain(b), dims=([0, 1], [2, 0]))
    np.testing.assert_allclose(ti.to_numpy(out), expected.numpy(), rtol=1e-5)


@pytest.mark.parametrize("b_shape,b_spec", [((4, 4), (None, None)), ((4, 4), ("data", None)),
                                            ((2, 4, 3), ("data", None, None))],
                         ids=["matrix_replicated", "matrix_rows_sharded", "batched"])
def test_ldl_solve_with_a_broadcast_right_hand_side(mesh, b_shape, b_spec):
    # DTensor cut a broadcast B's rows as if they were LD's batch dim ("each
    # A matrix is 5 by 5 but each b matrix is 3 by 5"); the result keeps
    # LD's batch spec
    a = host((2, 4, 4))
    a = a @ np.swapaxes(a, -1, -2) + 4 * np.eye(4, dtype=np.float32)
    ld, pivots = torch.linalg.ldl_factor(plain(a))
    b = host(b_shape, 1)
    with ti.jax_semantics():
        out = torch.linalg.ldl_solve(put(ld.numpy(), ("data", None, "model"), mesh),
                                     ti.distribute_tensor(pivots.numpy(), parity.TensorLayout(
                                         ("data", None), mesh)),
                                     put(b, b_spec, mesh))
    expected = torch.linalg.ldl_solve(ld, pivots, plain(b))
    np.testing.assert_allclose(ti.to_numpy(out), expected.numpy(), rtol=1e-4, atol=1e-5)
    assert ti.describe(out).spec[0] == ("data",)


def test_advanced_index_gradient_over_a_sharded_dim(mesh):
    a = host((4, 4, 4))
    x = put(a, ("data", None, None), mesh, grad=True)
    with ti.jax_semantics():
        y = x[[1, 2]]
        (y * y).sum().backward()
    ref_x = plain(a, grad=True)
    (ref_x[[1, 2]] ** 2).sum().backward()
    np.testing.assert_allclose(ti.to_numpy(y), a[[1, 2]], rtol=1e-6)
    assert_grad_placed(x, ref_x.grad.numpy())


def test_tensor_split_by_a_tensor_of_indices(mesh):
    a = host((4, 4, 4))
    x = put(a, ("data", None, None), mesh)
    with ti.jax_semantics():
        pieces = torch.tensor_split(x, torch.tensor([1, 3, 3]))
    want = torch.tensor_split(plain(a), torch.tensor([1, 3, 3]))
    assert len(pieces) == len(want)
    for got, ref in zip(pieces, want):
        np.testing.assert_array_equal(ti.to_numpy(got), ref.numpy())


def test_as_strided_runs_on_the_gathered_values(mesh):
    a = np.arange(16, dtype=np.float32)
    x = put(a, ("data",), mesh)
    with ti.jax_semantics():
        y = torch.as_strided(x, (2, 2, 2, 2), (1, 1, 1, 1))
    np.testing.assert_array_equal(ti.to_numpy(y),
                                  torch.as_strided(plain(a), (2, 2, 2, 2), (1, 1, 1, 1)).numpy())


def test_as_strided_gradient_is_refused_with_a_parity_error(mesh):
    x = put(np.arange(16, dtype=np.float32), ("data",), mesh, grad=True)
    with ti.jax_semantics(), pytest.raises(parity.UnsupportedOpError, match="as_strided"):
        torch.as_strided(x, (2, 2), (1, 2))


def test_group_norm_gradient_with_sharded_channels(mesh):
    a = host((1, 6, 4))
    x = put(a, (None, "data", None), mesh, grad=True)
    with ti.jax_semantics():
        y = F.group_norm(x, 2)
        (y * y).sum().backward()
    ref_x = plain(a, grad=True)
    ref = F.group_norm(ref_x, 2)
    (ref * ref).sum().backward()
    np.testing.assert_allclose(ti.to_numpy(y), ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    assert_grad_placed(x, ref_x.grad.numpy())


def test_squeeze_copy_keeps_the_sharded_dim(mesh):
    a = host((4, 1, 4, 1))
    x = put(a, (None, None, "model", None), mesh)
    with ti.jax_semantics():
        y = torch.squeeze_copy(x)
    np.testing.assert_array_equal(ti.to_numpy(y), a.squeeze())
    assert ti.describe(y).spec == ((), ("model",))


def test_sgn_gradient_reads_back_as_zeros(mesh):
    x = put(host((8, 8)), (None, None), mesh, grad=True)
    with ti.jax_semantics():
        torch.sgn(x).sum().backward()
    assert_grad_placed(x, np.zeros((8, 8), np.float32))


def test_cumprod_gradient(mesh):
    a = np.abs(host((8, 8))) + 0.5
    x = put(a, ("data", "model"), mesh, grad=True)
    with ti.jax_semantics():
        torch.cumprod(x, dim=0).sum().backward()
    ref_x = plain(a, grad=True)
    torch.cumprod(ref_x, dim=0).sum().backward()
    assert_grad_placed(x, ref_x.grad.numpy())


def test_kron_with_a_dim_split_over_two_axes_out_of_mesh_order(sim8):
    mesh = parity.DeviceMesh((2, 2, 2), ("a", "b", "c"))
    ha, hb = host((4, 8)), host((2, 4), 1)
    b = put(hb, (None, ("c", "b")), mesh, grad=True)
    with ti.jax_semantics():
        y = torch.kron(put(ha, (None, None), mesh), b)
        y.sum().backward()
    np.testing.assert_allclose(ti.to_numpy(y), np.kron(ha, hb), rtol=1e-5, atol=1e-5)
    assert ti.describe(y).spec == ((), ())
    ref_b = plain(hb, grad=True)
    torch.kron(plain(ha), ref_b).sum().backward()
    assert_grad_placed(b, ref_b.grad.numpy())


def test_tensor_split_by_distributed_indices(mesh):
    a = host((4, 4, 4))
    x = put(a, ("data", None, None), mesh)
    indices = ti.distribute_tensor(np.array([1, 3, 3]), L((None,), mesh))
    with ti.jax_semantics():
        pieces = torch.tensor_split(x, indices)
    want = torch.tensor_split(plain(a), torch.tensor([1, 3, 3]))
    assert len(pieces) == len(want)
    for got, ref in zip(pieces, want):
        np.testing.assert_array_equal(ti.to_numpy(got), ref.numpy())


def test_svd_lowrank_gradient_over_a_sharded_dim(mesh):
    a = host((8, 2))
    x = put(a, (None, "data"), mesh, grad=True)
    with ti.jax_semantics():
        _, s, _ = torch.svd_lowrank(x, q=2)
        s.sum().backward()
    ref_x = plain(a, grad=True)
    torch.svd_lowrank(ref_x, q=2)[1].sum().backward()
    np.testing.assert_allclose(ti.to_numpy(s), np.linalg.svd(a, compute_uv=False), rtol=1e-4)
    assert tuple(x.grad.placements) == tuple(x.placements)
    np.testing.assert_allclose(ti.to_numpy(x.grad), ref_x.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_repeat_interleave_gradient_over_a_sharded_dim(mesh):
    a = host((2, 3, 4))
    x = put(a, (None, None, "model"), mesh, grad=True)
    with ti.jax_semantics():
        torch.repeat_interleave(x, repeats=2).sum().backward()
    ref_x = plain(a, grad=True)
    torch.repeat_interleave(ref_x, repeats=2).sum().backward()
    assert_grad_placed(x, ref_x.grad.numpy())


def test_hfftn_of_a_sharded_input(mesh):
    a = host((4, 5, 6))
    x = put(a, ("data", None, None), mesh)
    with ti.jax_semantics():
        y = torch.fft.hfftn(x, norm="ortho")
    np.testing.assert_allclose(ti.to_numpy(y), torch.fft.hfftn(plain(a), norm="ortho").numpy(),
                               rtol=1e-4, atol=1e-4)


def test_to_sparse_is_refused_with_a_parity_error(mesh):
    x = put(host((4, 4)), ("data", None), mesh)
    with ti.jax_semantics(), pytest.raises(parity.UnsupportedOpError, match="dense"):
        x.to_sparse()
