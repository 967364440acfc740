"""Neural-network functions (group ``nn``): the broad entries (softmax,
norms, embedding lookup, cross-entropy...: divisible and indivisible shapes)
and the JAX twins of PyTorch OpInfo ops.

Convolutions use ``lax.conv_general_dilated`` with NCH(W) / OIH(W)
dimension numbers, which is ``F.conv1d`` / ``F.conv2d``'s layout; pooling is
``lax.reduce_window``. Attention: ``nn.dot_product_attention`` takes
(B, T, N, H), torch's ``scaled_dot_product_attention`` (B, N, T, H): the JAX
side swaps axes 1, 2 in and out.
"""

from __future__ import annotations

from conformance.catalogue.entry import F32, M2, TWIN_BUDGET, Arg, Op, ShapeSet

_CONV1 = "lax.conv_general_dilated(a, b, (stride,), [(padding, padding)])"
_CONV2 = "lax.conv_general_dilated(a, b, (stride, stride), [(padding, padding)] * 2)"
_CONV_VARIANTS = ({"stride": 1, "padding": 1}, {"stride": 2, "padding": 0})
_POOL_J = "lax.reduce_window(a, {init}, {fn}, (1, 1, 2, 2), (1, 1, 2, 2), 'VALID')"


def _broad() -> list[Op]:
    ops: list[Op] = []

    def nn_op(name, jx, tx, args, shape_sets, variants=({},), tol="transcendental", **kw):
        ops.append(Op(name, "nn", jx, tx, args, shape_sets, variants, tol=tol,
                      **{"budget": (3, 6, 6), **kw}))

    nn_op("softmax", "nn.softmax(a, axis=axis)", "torch.softmax(a, dim=axis)", (F32,), M2,
          ({"axis": -1}, {"axis": 0}))
    nn_op("log_softmax", "nn.log_softmax(a, axis=axis)", "torch.log_softmax(a, dim=axis)",
          (F32,), M2, ({"axis": -1}, {"axis": 0}))
    nn_op("layer_norm",
          "(a - jnp.mean(a, -1, keepdims=True)) * lax.rsqrt(jnp.var(a, -1, keepdims=True) + 1e-5)"
          " * b + c",
          "F.layer_norm(a, (a.shape[-1],), b, c, eps=1e-5)", (F32, F32, F32),
          (ShapeSet("div", ((8, 16), (16,), (16,))),
           ShapeSet("indiv", ((6, 10), (10,), (10,)), False)), tol="reduction",
          budget=(4, 8, 8))
    nn_op("rms_norm", "a * lax.rsqrt(jnp.mean(a * a, -1, keepdims=True) + 1e-6) * b",
          "F.rms_norm(a, (a.shape[-1],), b, eps=1e-6)", (F32, F32),
          (ShapeSet("div", ((8, 16), (16,))), ShapeSet("indiv", ((6, 10), (10,)), False)),
          tol="reduction", budget=(4, 8, 8))
    nn_op("take", "jnp.take(a, b, axis=0)", "F.embedding(b, a)", (F32, Arg("int32", "index:16")),
          (ShapeSet("div", ((16, 8), (8, 16))),), tol="exact", budget=(4, 10, 10),
          doc="embedding lookup: table (V, D), ids (B, T)")
    nn_op("one_hot", "nn.one_hot(a, num_classes)",
          "F.one_hot(a.long(), num_classes).float()", (Arg("int32", "index:8"),),
          (ShapeSet("div", ((8, 16),)), ShapeSet("indiv", ((6, 10),), False)),
          ({"num_classes": 8},), tol="exact", grad=False, budget=(3, 5, 6))
    nn_op("cross_entropy",
          "-jnp.mean(jnp.take_along_axis(nn.log_softmax(a, axis=-1), b[:, None], axis=-1))",
          "F.cross_entropy(a, b.long())", (F32, Arg("int32", "index:6")),
          (ShapeSet("div", ((8, 16), (8,))), ShapeSet("indiv", ((6, 10), (6,)), False)),
          tol="reduction", budget=(4, 8, 8),
          doc="mean softmax cross-entropy with integer labels (< 6: valid for both shapes)")
    nn_op("cumsum", "jnp.cumsum(a, axis=axis)", "torch.cumsum(a, dim=axis)", (F32,), M2,
          ({"axis": 0}, {"axis": 1}), tol="reduction")
    return ops


def _opinfo_twins() -> list[Op]:
    f = Arg()
    out: list[Op] = []

    def nn(name, jx, tx, shapes, args=None, variants=({},), tol="reduction", **kw):
        out.append(Op(name, "nn", jx, tx, args or tuple(f for _ in shapes),
                      (ShapeSet("div", shapes),), variants, tol=tol,
                      **{"budget": TWIN_BUDGET, **kw}))

    nn("conv1d", _CONV1, "F.conv1d(a, b, stride=stride, padding=padding)",
       ((8, 4, 16), (8, 4, 3)), variants=_CONV_VARIANTS, tol="matmul",
       doc="NCH input, OIH kernel")
    nn("conv2d", _CONV2, "F.conv2d(a, b, stride=stride, padding=padding)",
       ((8, 4, 8, 8), (8, 4, 3, 3)), variants=_CONV_VARIANTS, tol="matmul",
       doc="NCHW input, OIHW kernel")
    nn("max_pool2d", _POOL_J.format(init="-jnp.inf", fn="lax.max"), "F.max_pool2d(a, 2)",
       ((8, 4, 8, 8),), tol="exact")
    nn("avg_pool2d", _POOL_J.format(init="0.0", fn="lax.add") + " / 4", "F.avg_pool2d(a, 2)",
       ((8, 4, 8, 8),), tol="elementwise")
    nn("glu", "nn.glu(a, axis=-1)", "F.glu(a, dim=-1)", ((8, 16),), tol="transcendental")
    nn("mse_loss", "jnp.mean((a - b) ** 2)", "F.mse_loss(a, b)", ((8, 16), (8, 16)))
    nn("l1_loss", "jnp.mean(jnp.abs(a - b))", "F.l1_loss(a, b)", ((8, 16), (8, 16)))
    nn("nll_loss", "-jnp.mean(jnp.take_along_axis(a, b[:, None], axis=-1))",
       "F.nll_loss(a, b.long())", ((8, 16), (8,)), args=(f, Arg("int32", "index:16")))
    nn("binary_cross_entropy_with_logits",
       "jnp.mean(jnp.maximum(a, 0) - a * b + jnp.log1p(jnp.exp(-jnp.abs(a))))",
       "F.binary_cross_entropy_with_logits(a, b)", ((8, 16), (8, 16)),
       args=(f, Arg(domain="positive")))
    nn("scaled_dot_product_attention",
       "jnp.swapaxes(nn.dot_product_attention(jnp.swapaxes(a, 1, 2), jnp.swapaxes(b, 1, 2), "
       "jnp.swapaxes(c, 1, 2)), 1, 2)",
       "F.scaled_dot_product_attention(a, b, c)", ((2, 4, 8, 16),) * 3,
       doc="(B, N, T, H) on the torch side, heads on dim 1")
    nn("batch_norm_eval", "(a - b[None, :, None]) * lax.rsqrt(c[None, :, None] + 1e-5)",
       "F.batch_norm(a, b, c, training=False, eps=1e-5)", ((8, 4, 16), (4,), (4,)),
       args=(f, f, Arg(domain="positive")), grad=False,
       doc="inference batch norm with running mean b and variance c")
    nn("group_norm",
       "((a.reshape(8, 2, -1) - jnp.mean(a.reshape(8, 2, -1), -1, keepdims=True)) * "
       "lax.rsqrt(jnp.var(a.reshape(8, 2, -1), -1, keepdims=True) + 1e-5)).reshape(a.shape)",
       "F.group_norm(a, 2, eps=1e-5)", ((8, 4, 16),))
    return out


OPS: tuple[Op, ...] = (*_broad(), *_opinfo_twins())
