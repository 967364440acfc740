"""Linear algebra and neural-network functions: JAX twins of OpInfo ops.

Matrices that must be invertible or positive definite are built on both
sides from the input by the same expression (``a + 4 I``, ``a aᵀ + 4 I``), so
their values are well conditioned for float32 comparison. Convolutions use
``lax.conv_general_dilated`` with NCH(W) / OIH(W) dimension numbers, which
is ``F.conv1d`` / ``F.conv2d``'s layout; pooling is ``lax.reduce_window``.
Attention: ``nn.dot_product_attention`` takes (B, T, N, H), torch's
``scaled_dot_product_attention`` (B, N, T, H): the JAX side swaps axes 1, 2
in and out.
"""

from __future__ import annotations

from conformance.catalogue_ops import NEW_BUDGET

_EYE_J = "4 * jnp.eye(a.shape[-1], dtype=a.dtype)"
_EYE_T = "4 * torch.eye(a.shape[-1], dtype=a.dtype)"
_SPD_J = f"(a @ jnp.swapaxes(a, -1, -2) + {_EYE_J})"
_SPD_T = f"(a @ a.mT + {_EYE_T})"

# (name, jax, torch, shapes, tolerance class, differentiable, variants)
_LINALG = [
    ("dot", "jnp.dot(a, b)", "torch.dot(a, b)", ((16,), (16,)), "matmul", True),
    ("vdot", "jnp.vdot(a, b)", "torch.vdot(a, b)", ((16,), (16,)), "matmul", True),
    ("inner", "jnp.inner(a, b)", "torch.inner(a, b)", ((8, 16), (8, 16)), "matmul", True),
    ("outer", "jnp.outer(a, b)", "torch.outer(a, b)", ((8,), (16,)), "matmul", True),
    ("mv", "jnp.matmul(a, b)", "torch.mv(a, b)", ((8, 16), (16,)), "matmul", True),
    ("kron", "jnp.kron(a, b)", "torch.kron(a, b)", ((4, 8), (2, 4)), "matmul", True),
    ("tensordot", "jnp.tensordot(a, b, axes=1)", "torch.tensordot(a, b, dims=1)",
     ((8, 16), (16, 8)), "matmul", True),
    ("vecdot", "jnp.linalg.vecdot(a, b)", "torch.linalg.vecdot(a, b)", ((8, 16), (8, 16)),
     "matmul", True),
    ("cross", "jnp.cross(a, b)", "torch.linalg.cross(a, b)", ((8, 3), (8, 3)), "matmul", True),
    ("multi_dot", "jnp.linalg.multi_dot([a, b, c])", "torch.linalg.multi_dot([a, b, c])",
     ((8, 16), (16, 8), (8, 16)), "matmul", True),
    ("addmm", "c + jnp.matmul(a, b)", "torch.addmm(c, a, b)", ((8, 16), (16, 8), (8, 8)),
     "matmul", True),
    ("baddbmm", "c + jnp.matmul(a, b)", "torch.baddbmm(c, a, b)",
     ((4, 8, 16), (4, 16, 8), (4, 8, 8)), "matmul", True),
    ("linear", "jnp.matmul(a, b.T) + c", "F.linear(a, b, c)", ((8, 16), (8, 16), (8,)),
     "matmul", True),
    ("bilinear_form", "jnp.einsum('bi,oij,bj->bo', a, b, c)", "F.bilinear(a, c, b)",
     ((8, 4), (8, 4, 4), (8, 4)), "matmul", True),
    ("det", "jnp.linalg.det(a + " + _EYE_J + ")", "torch.linalg.det(a + " + _EYE_T + ")",
     ((8, 4, 4),), "reduction", True),
    ("slogdet", "tuple(jnp.linalg.slogdet(a + " + _EYE_J + "))",
     "tuple(torch.linalg.slogdet(a + " + _EYE_T + "))", ((8, 4, 4),), "reduction", True),
    ("inv", "jnp.linalg.inv(a + " + _EYE_J + ")", "torch.linalg.inv(a + " + _EYE_T + ")",
     ((8, 4, 4),), "reduction", True),
    ("solve", "jnp.linalg.solve(a + " + _EYE_J + ", b)",
     "torch.linalg.solve(a + " + _EYE_T + ", b)", ((8, 4, 4), (8, 4, 2)), "reduction", True),
    ("cholesky", f"jnp.linalg.cholesky({_SPD_J})", f"torch.linalg.cholesky({_SPD_T})",
     ((8, 4, 4),), "reduction", True),
    ("eigvalsh", f"jnp.linalg.eigvalsh({_SPD_J})", f"torch.linalg.eigvalsh({_SPD_T})",
     ((8, 4, 4),), "reduction", True),
    ("svdvals", "jnp.linalg.svdvals(a)", "torch.linalg.svdvals(a)", ((8, 4, 4),), "reduction",
     True),
    ("matrix_power", "jnp.linalg.matrix_power(a, 3)", "torch.linalg.matrix_power(a, 3)",
     ((8, 4, 4),), "matmul", True),
    ("matrix_norm", "jnp.linalg.matrix_norm(a)", "torch.linalg.matrix_norm(a)", ((8, 4, 4),),
     "reduction", True),
    ("pinv", f"jnp.linalg.pinv({_SPD_J})", f"torch.linalg.pinv({_SPD_T})", ((8, 4, 4),),
     "reduction", False),
]

_CONV1 = "lax.conv_general_dilated(a, b, (stride,), [(padding, padding)])"
_CONV2 = "lax.conv_general_dilated(a, b, (stride, stride), [(padding, padding)] * 2)"
_CONV_VARIANTS = ({"stride": 1, "padding": 1}, {"stride": 2, "padding": 0})
_POOL_J = "lax.reduce_window(a, {init}, {fn}, (1, 1, 2, 2), (1, 1, 2, 2), 'VALID')"


def ops() -> list:
    """The linear-algebra (group ``linalg``) and nn (group ``nn``) entries."""
    from conformance.catalogue import Arg, Op, ShapeSet

    f = Arg()
    out = []
    for name, jx, tx, shapes, tol, grad in _LINALG:
        out.append(Op(name, "linalg", jx, tx, tuple(f for _ in shapes),
                      (ShapeSet("div", shapes),), tol=tol, grad=grad, budget=NEW_BUDGET))

    def nn(name, jx, tx, shapes, args=None, variants=({},), tol="reduction", **kw):
        out.append(Op(name, "nn", jx, tx, args or tuple(f for _ in shapes),
                      (ShapeSet("div", shapes),), variants, tol=tol,
                      **{"budget": NEW_BUDGET, **kw}))

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
