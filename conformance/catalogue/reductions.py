"""Reductions, scans, sorting and selection (group ``reduction``): the broad
entries (each over axis 0, axis 1 keeping dims, and all axes; divisible and
indivisible shapes) and the JAX twins of PyTorch OpInfo ops.

Defaults that differ between the libraries are written on both sides:
``std``/``var`` use ``ddof=0`` / ``correction=0``; ``quantile`` is linear
interpolation on both; ``median`` is not here (JAX averages the two middle
values of an even count, torch returns the lower one: not the same
function); ``argsort`` is stable on both.
"""

from __future__ import annotations

from conformance.catalogue.entry import F32, M2, POS, TWIN_BUDGET, Arg, Op, ShapeSet

_REDUCE_VARIANTS = (
    {"axis": 0, "keepdims": False},
    {"axis": 1, "keepdims": True},
    {"axis": None, "keepdims": False},
)

_BROAD = [
    ("sum", "jnp.sum(a, axis=axis, keepdims=keepdims)",
     "torch.sum(a, dim=axis, keepdim=keepdims)", F32, "reduction", True),
    ("mean", "jnp.mean(a, axis=axis, keepdims=keepdims)",
     "torch.mean(a, dim=axis, keepdim=keepdims)", F32, "reduction", True),
    ("max", "jnp.max(a, axis=axis, keepdims=keepdims)",
     "torch.amax(a, dim=() if axis is None else axis, keepdim=keepdims)", F32, "exact", True),
    ("min", "jnp.min(a, axis=axis, keepdims=keepdims)",
     "torch.amin(a, dim=() if axis is None else axis, keepdim=keepdims)", F32, "exact", True),
    ("prod", "jnp.prod(a, axis=axis, keepdims=keepdims)",
     "torch.prod(a) if axis is None else torch.prod(a, dim=axis, keepdim=keepdims)",
     POS, "reduction", True),
    ("argmax", "jnp.argmax(a, axis=axis, keepdims=keepdims)",
     "torch.argmax(a, dim=axis, keepdim=keepdims)", F32, "exact", False),
    ("logsumexp", "nn.logsumexp(a, axis=axis, keepdims=keepdims)",
     "torch.logsumexp(a, dim=tuple(range(a.ndim)) if axis is None else axis, keepdim=keepdims)",
     F32, "reduction", True),
    ("var", "jnp.var(a, axis=axis, keepdims=keepdims)",
     "torch.var(a, dim=axis, keepdim=keepdims, correction=0)", F32, "reduction", True),
]



def _broad() -> list[Op]:
    return [Op(name, "reduction", jx, tx, (arg,), M2, _REDUCE_VARIANTS, tol=tol, grad=grad,
               budget=(2, 3, 3)) for name, jx, tx, arg, tol, grad in _BROAD]


_AXES = ({"axis": 0, "keepdims": False}, {"axis": 1, "keepdims": True},
         {"axis": None, "keepdims": False})
_AXIS = ({"axis": 0}, {"axis": 1})

# (name, jax, torch, domain or dtype spec, variants, tolerance class, differentiable)
_REDUCTIONS = [
    ("std", "jnp.std(a, axis=axis, keepdims=keepdims)",
     "torch.std(a, dim=axis, keepdim=keepdims, correction=0)", "normal", _AXES, "reduction",
     True),
    ("nansum", "jnp.nansum(jnp.where(a > 1.5, jnp.nan, a), axis=axis, keepdims=keepdims)",
     "torch.nansum(torch.where(a > 1.5, torch.nan, a), dim=axis, keepdim=keepdims)", "normal",
     _AXES, "reduction", True),
    ("nanmean", "jnp.nanmean(jnp.where(a > 1.5, jnp.nan, a), axis=axis, keepdims=keepdims)",
     "torch.nanmean(torch.where(a > 1.5, torch.nan, a), dim=axis, keepdim=keepdims)", "normal",
     _AXES, "reduction", True),
    ("argmin", "jnp.argmin(a, axis=axis, keepdims=keepdims)",
     "torch.argmin(a, dim=axis, keepdim=keepdims)", "normal", _AXES, "exact", False),
    ("all", "jnp.all(a, axis=axis, keepdims=keepdims)",
     "torch.all(a) if axis is None else torch.all(a, dim=axis, keepdim=keepdims)", "bool",
     _AXES, "exact", False),
    ("any", "jnp.any(a, axis=axis, keepdims=keepdims)",
     "torch.any(a) if axis is None else torch.any(a, dim=axis, keepdim=keepdims)", "bool",
     _AXES, "exact", False),
    ("count_nonzero", "jnp.count_nonzero(a, axis=axis)", "torch.count_nonzero(a, dim=axis)",
     "bool", ({"axis": 0}, {"axis": None}), "exact", False),
    ("vector_norm", "jnp.linalg.vector_norm(a, ord=ord, axis=axis, keepdims=keepdims)",
     "torch.linalg.vector_norm(a, ord=ord, dim=axis, keepdim=keepdims)", "normal",
     ({"ord": 2, "axis": 1, "keepdims": False}, {"ord": 1, "axis": 0, "keepdims": True},
      {"ord": 2, "axis": None, "keepdims": False}), "reduction", True),
    ("quantile", "jnp.quantile(a, q, axis=axis)", "torch.quantile(a, q, dim=axis)", "normal",
     ({"q": 0.25, "axis": 0}, {"q": 0.5, "axis": 1}), "reduction", True),
    ("cumprod", "jnp.cumprod(a, axis=axis)", "torch.cumprod(a, dim=axis)", "positive", _AXIS,
     "reduction", True),
    ("cummax", "lax.cummax(a, axis=axis)", "torch.cummax(a, dim=axis).values", "normal", _AXIS,
     "exact", True),
    ("cummin", "lax.cummin(a, axis=axis)", "torch.cummin(a, dim=axis).values", "normal", _AXIS,
     "exact", True),
    ("logcumsumexp", "lax.cumlogsumexp(a, axis=axis)", "torch.logcumsumexp(a, dim=axis)",
     "normal", _AXIS, "reduction", True),
    ("diff", "jnp.diff(a, axis=axis)", "torch.diff(a, dim=axis)", "normal", _AXIS,
     "elementwise", True),
    ("trapezoid", "jnp.trapezoid(a, axis=axis)", "torch.trapezoid(a, dim=axis)", "normal",
     _AXIS, "reduction", True),
    ("sort", "jnp.sort(a, axis=axis)", "torch.sort(a, dim=axis).values", "normal", _AXIS,
     "exact", True),
    ("argsort", "jnp.argsort(a, axis=axis, stable=True)",
     "torch.argsort(a, dim=axis, stable=True)", "normal", _AXIS, "exact", False),
    ("top_k", "tuple(lax.top_k(a, k))", "tuple(torch.topk(a, k))", "normal", ({"k": 3},),
     "exact", True),
]


def _opinfo_twins() -> list[Op]:
    one = (ShapeSet("div", ((8, 16),)),)
    out = []
    for name, jx, tx, domain, variants, tol, grad in _REDUCTIONS:
        arg = Arg("bool", "bool") if domain == "bool" else Arg(domain=domain)
        out.append(Op(name, "reduction", jx, tx, (arg,), one, variants, tol=tol, grad=grad,
                      budget=TWIN_BUDGET))
    out.append(Op("bincount", "reduction", "jnp.bincount(a, length=8)",
                  "torch.bincount(a, minlength=8)", (Arg("int32", "index:8"),),
                  (ShapeSet("div", ((64,),)),), tol="exact", grad=False, budget=TWIN_BUDGET,
                  doc="counts of values in [0, 8): the output length is fixed on both sides"))
    out.append(Op("searchsorted", "reduction", "jnp.searchsorted(jnp.sort(a), b)",
                  "torch.searchsorted(torch.sort(a).values, b)", (Arg(), Arg()),
                  (ShapeSet("div", ((16,), (8, 16))),), tol="exact", grad=False,
                  budget=TWIN_BUDGET, doc="insertion points of b in sorted(a)"))
    return out


OPS: tuple[Op, ...] = (*_broad(), *_opinfo_twins())
