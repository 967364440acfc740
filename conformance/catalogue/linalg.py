"""Linear algebra (group ``linalg``): the broad entries (matmul, batched
matmul, einsum: every class of sharded/unsharded batch, free and
contracting dims, sampled) and the JAX twins of PyTorch OpInfo ops.

Matrices that must be invertible or positive definite are built on both
sides from the input by the same expression (``a + 4 I``, ``a aᵀ + 4 I``), so
their values are well conditioned for float32 comparison.
"""

from __future__ import annotations

from conformance.catalogue.entry import F32, TWIN_BUDGET, Arg, Op, ShapeSet

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


def _broad() -> list[Op]:
    ops: list[Op] = []
    # Linear algebra: stratified sampling covers every combination of
    # sharded/unsharded batch, free and contracting dims. Budgets on the
    # (2,2,2) mesh are small: DTensor's strategy search for a 3-D mesh costs
    # 1-2 s per new layout pair (matmul keeps one case per class).
    ops.append(Op(
        "matmul", "linalg", "jnp.matmul(a, b)", "torch.matmul(a, b)", (F32, F32),
        (ShapeSet("div", ((8, 16), (16, 8))), ShapeSet("indiv", ((6, 10), (10, 6)), False)),
        tol="matmul", mixed=True, budget=(9, 32, 16),
        doc="2-D (M,K)@(K,N): every class of sharded/unsharded M, K (each side), N"))
    ops.append(Op(
        "batched_matmul", "linalg", "jnp.matmul(a, b)", "torch.bmm(a, b)", (F32, F32),
        (ShapeSet("div", ((8, 8, 16), (8, 16, 8))),
         ShapeSet("indiv", ((6, 4, 10), (6, 10, 4)), False)),
        tol="matmul", budget=(8, 20, 8),
        doc="(B,M,K)@(B,K,N): batch, free and contracting dims sharded or not, sampled"))
    ops.append(Op(
        "einsum", "linalg", "jnp.einsum(eq, a, b)", "torch.einsum(eq, a, b)", (F32, F32),
        (ShapeSet("div", ((8, 16), (16, 8))),),
        ({"eq": "ij,jk->ik"}, {"eq": "ij,jk->ki"}, {"eq": "ij,jk->j"}),
        tol="matmul", budget=(3, 6, 3)))
    ops.append(Op(
        "einsum_batched", "linalg", "jnp.einsum(eq, a, b)", "torch.einsum(eq, a, b)", (F32, F32),
        (ShapeSet("div", ((8, 8, 16), (8, 16, 8))),),
        ({"eq": "bij,bjk->bik"}, {"eq": "bij,bjk->bk"}),
        tol="matmul", budget=(4, 6, 3)))
    return ops


def _opinfo_twins() -> list[Op]:
    f = Arg()
    return [Op(name, "linalg", jx, tx, tuple(f for _ in shapes), (ShapeSet("div", shapes),),
               tol=tol, grad=grad, budget=TWIN_BUDGET)
            for name, jx, tx, shapes, tol, grad in _LINALG]


OPS: tuple[Op, ...] = (*_broad(), *_opinfo_twins())
