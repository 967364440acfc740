"""The op catalogue: every op once, its JAX and its torch callable side by side.

A callable is written as a Python expression over the inputs ``a``, ``b``,
``c`` and the case's kwargs by name, evaluated lazily in the backend's own
namespace (JAX: ``jnp``, ``jax``, ``lax``, ``nn``; torch: ``torch``, ``F``),
so this module imports neither library and ``parity ops`` can print both.

```python
op = OPS["sum"]
op.jax    # 'jnp.sum(a, axis=axis, keepdims=keepdims)'
op.torch  # 'torch.sum(a, dim=axis, keepdim=keepdims)'
fn = op.compile("jax", {"jnp": jax.numpy, ...}, ["axis", "keepdims"])
```

API functions of SPEC (``distribute_tensor``, ``all_reduce``...) are ops of
group ``api``: their expressions call the backend module ``B``.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping, Sequence
from typing import Any, Callable

# Tolerance classes: (rtol, atol) for float32 on CPU. Data movement and
# integer results are always exact. "matmul" on CUDA is widened for TF32
# (10-bit mantissa: relative error ~2**-11 per product, summed over K).
TOLERANCES: dict[str, dict[str, tuple[float, float]]] = {
    "cpu": {
        "exact": (0.0, 0.0),
        "elementwise": (1e-6, 1e-6),
        "transcendental": (2e-6, 2e-6),
        "reduction": (2e-5, 2e-5),
        "matmul": (2e-5, 2e-5),
    },
    "cuda": {
        "exact": (0.0, 0.0),
        "elementwise": (1e-6, 1e-6),
        "transcendental": (1e-5, 1e-5),
        "reduction": (1e-4, 1e-4),
        "matmul": (1e-2, 1e-2),  # TF32 bound (torch.backends.cuda.matmul.allow_tf32)
    },
}
# Gradients go through a sum and a backward pass: at least "reduction".
GRAD_CLASS = {"exact": "reduction", "elementwise": "reduction",
              "transcendental": "reduction", "reduction": "reduction",
              "matmul": "matmul"}


def tolerance(tol_class: str, device: str = "cpu", dtype: str = "float32") -> dict[str, Any]:
    """``{"class", "rtol", "atol"}`` for a tolerance class on a device.

    Integer and bool dtypes are exact whatever the class. Raises ``KeyError``
    for an unknown class or device.
    """
    if not dtype.startswith(("float", "bfloat", "complex")):
        tol_class = "exact"
    rtol, atol = TOLERANCES[device][tol_class]
    return {"class": tol_class, "rtol": rtol, "atol": atol}


@dataclasses.dataclass(frozen=True)
class Arg:
    """One input of an op: its dtype and the value domain it is drawn from.

    Domains: ``normal``, ``positive`` (0.5..2), ``nonzero`` (|x| in 0.5..2),
    ``small`` (-2..2 for exponents), ``bool``, ``index:N`` (ints in [0, N)).
    """

    dtype: str = "float32"
    domain: str = "normal"


@dataclasses.dataclass(frozen=True)
class ShapeSet:
    """Shapes of the array inputs for one family of cases.

    ``tag`` names it in case ids (``div``, ``indiv``, ``bcast``...);
    ``divisible`` says whether every dim divides by 8 (any layout fits).
    """

    tag: str
    shapes: tuple[tuple[int, ...], ...]
    divisible: bool = True


@dataclasses.dataclass(frozen=True)
class Op:
    """One catalogue entry.

    ``jax`` / ``torch``: expressions over ``a, b, c`` and the kwargs.
    ``variants``: kwargs dicts, one family of cases each. ``tol``: tolerance
    class. ``grad``: differentiable in its floating inputs. ``mixed``: also
    generate cases where the last operand is a host array or a Python scalar.
    ``budget``: layout combinations per (mesh, shape set, variant) before
    stratified sampling.
    """

    name: str
    group: str
    jax: str
    torch: str
    args: tuple[Arg, ...]
    shape_sets: tuple[ShapeSet, ...]
    variants: tuple[Mapping[str, Any], ...] = ({},)
    tol: str = "elementwise"
    grad: bool = True
    mixed: bool = False
    budget: tuple[int, int, int] = (3, 6, 6)  # per mesh (8,), (2,4), (2,2,2)
    raw_torch: str | None = None  # raw DTensor expression where it differs
    doc: str = ""

    def compile(self, backend: str, namespace: Mapping[str, Any],
                kwarg_names: Sequence[str], raw: bool = False) -> Callable[..., Any]:
        """The callable ``f(a, b, c, **kwargs)`` for ``backend`` ("jax"/"torch")."""
        expr = self.jax if backend == "jax" else (
            self.raw_torch if raw and self.raw_torch else self.torch)
        params = ", ".join(["a=None", "b=None", "c=None"] + [f"{k}=None" for k in kwarg_names])
        return eval(f"lambda {params}: {expr}", dict(namespace))  # noqa: S307 - our own table


F32, I32, BOOL = Arg(), Arg("int32", "index:8"), Arg("bool", "bool")
POS, NONZERO, SMALL = Arg(domain="positive"), Arg(domain="nonzero"), Arg(domain="small")

M2 = (ShapeSet("div", ((8, 16),)), ShapeSet("indiv", ((6, 10),), False))
M2x2 = (
    ShapeSet("div", ((8, 16), (8, 16))),
    ShapeSet("bcast", ((8, 16), (16,))),
    ShapeSet("indiv", ((6, 10), (6, 10)), False),
)

_UNARY = [
    ("neg", "jnp.negative(a)", "torch.neg(a)", F32, "exact"),
    ("abs", "jnp.abs(a)", "torch.abs(a)", F32, "exact"),
    ("exp", "jnp.exp(a)", "torch.exp(a)", F32, "transcendental"),
    ("log", "jnp.log(a)", "torch.log(a)", POS, "transcendental"),
    ("sqrt", "jnp.sqrt(a)", "torch.sqrt(a)", POS, "transcendental"),
    ("square", "jnp.square(a)", "torch.square(a)", F32, "elementwise"),
    ("tanh", "jnp.tanh(a)", "torch.tanh(a)", F32, "transcendental"),
    ("sigmoid", "nn.sigmoid(a)", "torch.sigmoid(a)", F32, "transcendental"),
    ("relu", "nn.relu(a)", "torch.relu(a)", F32, "exact"),
    ("gelu", "nn.gelu(a, approximate=False)", "F.gelu(a)", F32, "transcendental"),
]

_BINARY = [
    ("add", "jnp.add(a, b)", "torch.add(a, b)", (F32, F32), "elementwise"),
    ("subtract", "jnp.subtract(a, b)", "torch.sub(a, b)", (F32, F32), "elementwise"),
    ("multiply", "jnp.multiply(a, b)", "torch.mul(a, b)", (F32, F32), "elementwise"),
    ("divide", "jnp.divide(a, b)", "torch.div(a, b)", (F32, NONZERO), "elementwise"),
    # torch.maximum takes tensors only; with a Python scalar a torch user clamps.
    ("maximum", "jnp.maximum(a, b)",
     "torch.clamp(a, min=b) if isinstance(b, (int, float)) else torch.maximum(a, b)",
     (F32, F32), "exact"),
    ("minimum", "jnp.minimum(a, b)",
     "torch.clamp(a, max=b) if isinstance(b, (int, float)) else torch.minimum(a, b)",
     (F32, F32), "exact"),
    ("power", "jnp.power(a, b)", "torch.pow(a, b)", (POS, SMALL), "transcendental"),
]

_REDUCE_VARIANTS = (
    {"axis": 0, "keepdims": False},
    {"axis": 1, "keepdims": True},
    {"axis": None, "keepdims": False},
)

_REDUCTIONS = [
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


def _catalogue() -> list[Op]:
    ops: list[Op] = []
    for name, jx, tx, arg, tol in _UNARY:
        ops.append(Op(name, "unary", jx, tx, (arg,), M2, tol=tol, budget=(3, 6, 6)))
    for name, jx, tx, args, tol in _BINARY:
        ops.append(Op(name, "binary", jx, tx, args, M2x2, tol=tol, mixed=True, budget=(4, 6, 6)))
    ops.append(Op(
        "where", "binary", "jnp.where(a, b, c)", "torch.where(a, b, c)", (BOOL, F32, F32),
        (ShapeSet("div", ((8, 16), (8, 16), (8, 16))),
         ShapeSet("bcast", ((8, 16), (8, 16), (16,))),
         ShapeSet("indiv", ((6, 10), (6, 10), (6, 10)), False)),
        tol="exact", mixed=True, budget=(4, 6, 6)))
    for name, jx, tx, arg, tol, grad in _REDUCTIONS:
        ops.append(Op(name, "reduction", jx, tx, (arg,), M2, _REDUCE_VARIANTS,
                      tol=tol, grad=grad, budget=(2, 3, 3)))

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

    # Shape ops: pure data movement, exact.
    def shape_op(name, jx, tx, shape_sets, variants=({},), **kw):
        ops.append(Op(name, "shape", jx, tx, kw.pop("args", (F32,)), shape_sets, variants,
                      tol="exact", **{"budget": (3, 6, 6), **kw}))

    shape_op("reshape", "jnp.reshape(a, shape)", "torch.reshape(a, shape)",
             (ShapeSet("div", ((8, 16),)), ShapeSet("indiv", ((6, 10),), False)),
             ({"shape": [-1]}, {"shape": [2, 4, -1]}, {"shape": [16, -1]}))
    shape_op("flatten", "jnp.reshape(a, (a.shape[0], -1))", "torch.flatten(a, 1)",
             (ShapeSet("div", ((8, 8, 16),)),), budget=(4, 10, 10))
    shape_op("transpose", "jnp.transpose(a)", "torch.transpose(a, 0, 1)", M2, budget=(3, 11, 8))
    shape_op("permute", "jnp.transpose(a, perm)", "torch.permute(a, perm)",
             (ShapeSet("div", ((8, 8, 16),)),), ({"perm": [2, 0, 1]}, {"perm": [1, 0, 2]}),
             budget=(4, 8, 8))
    shape_op("squeeze", "jnp.squeeze(a, axis=axis)", "torch.squeeze(a, dim=axis)",
             (ShapeSet("div", ((8, 1, 16),)),), ({"axis": 1},), budget=(3, 11, 10))
    shape_op("expand_dims", "jnp.expand_dims(a, axis)", "torch.unsqueeze(a, axis)", M2,
             ({"axis": 0}, {"axis": 2}))
    shape_op("concatenate", "jnp.concatenate([a, b], axis=axis)", "torch.cat([a, b], dim=axis)",
             (ShapeSet("div", ((8, 16), (8, 16))), ShapeSet("indiv", ((6, 10), (6, 10)), False)),
             ({"axis": 0}, {"axis": 1}), args=(F32, F32), budget=(4, 8, 8))
    shape_op("stack", "jnp.stack([a, b], axis=axis)", "torch.stack([a, b], dim=axis)",
             (ShapeSet("div", ((8, 16), (8, 16))),), ({"axis": 0}, {"axis": 2}),
             args=(F32, F32), budget=(4, 8, 8))
    shape_op("split", "tuple(jnp.split(a, sections, axis=axis))",
             "tuple(torch.tensor_split(a, sections, dim=axis))", M2,
             ({"sections": 2, "axis": 0}, {"sections": 4, "axis": 1}))
    shape_op("slice", "a[1:5, 2:]", "a[1:5, 2:]", M2, budget=(3, 8, 8))
    shape_op("pad", "jnp.pad(a, ((1, 2), (0, 3)))", "F.pad(a, (0, 3, 1, 2))", M2)

    # Neural-network ops.
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

    # The API functions of SPEC, through each backend module B.
    def api_op(name, expr, args, shape_sets, variants, tol="exact", **kw):
        ops.append(Op(name, "api", expr, expr, args, shape_sets, variants, tol=tol,
                      grad=False, **{"budget": (3, 5, 5), **kw}))

    api_op("distribute_tensor", "B.distribute_tensor(a, target)", (F32,), M2,
           ({"target": "sample"},), budget=(3, 8, 8),
           doc="reshard to kwargs.target (a layout); 'sample' is filled in per case")
    api_op("distribute_data_input", "B.distribute_data_input(a, target)", (F32,),
           (ShapeSet("div", ((8, 16),)),), ({"target": "sample"},), budget=(1, 1, 1),
           doc="host batch -> global batch laid out as kwargs.target")
    api_op("all_reduce", "B.all_reduce(a, op=op, axis_name=axis_name)", (F32,),
           (ShapeSet("div", ((8, 16),)),),
           tuple({"op": o, "axis_name": "sample"} for o in ("sum", "mean", "max", "min")),
           tol="reduction", budget=(1, 2, 2))
    api_op("all_gather", "B.all_gather(a, axis=axis, axis_name=axis_name)", (F32,),
           (ShapeSet("div", ((8, 16),)),),
           ({"axis": 0, "axis_name": "sample"}, {"axis": 1, "axis_name": "sample"}),
           budget=(2, 4, 4))
    api_op("reduce_scatter", "B.reduce_scatter(a, axis=axis, axis_name=axis_name, op=op)",
           (F32,), (ShapeSet("div", ((16, 32),)),),
           ({"axis": 0, "axis_name": "sample", "op": "sum"},
            {"axis": 1, "axis_name": "sample", "op": "max"}),
           tol="reduction", budget=(2, 4, 4))
    api_op("all_gather_variable", "B.all_gather_variable(a)", (F32,), M2, ({},),
           budget=(3, 6, 6))
    # JAX twins of PyTorch OpInfo ops, by family (smaller default budget).
    from conformance.catalogue_ops import all_ops

    ops.extend(all_ops())
    return ops


OPS: dict[str, Op] = {op.name: op for op in _catalogue()}
API_FUNCTIONS = tuple(name for name, op in OPS.items() if op.group == "api")
GROUPS = ("unary", "binary", "reduction", "linalg", "shape", "nn", "api")


def closest_ops(name: object, n: int = 3) -> list[str]:
    """Up to ``n`` catalogue op names closest to ``name`` (``difflib``), best first."""
    return difflib.get_close_matches(str(name), list(OPS), n=n, cutoff=0.6)


def unknown_op(name: object) -> str:
    """``'matmull' is not an op of the catalogue; did you mean matmul?`` (or,
    with nothing close, where the list is): never the whole list inline."""
    near = closest_ops(name)
    hint = (f"did you mean {' or '.join(near)}?" if near
            else "no op has a close name")
    return (f"{name!r} is not an op of the catalogue; {hint} (`parity ops` lists the "
            f"{len(OPS)} ops)")


def get_op(name: str) -> Op:
    """The catalogue entry ``name``. Raises ``KeyError`` with ``unknown_op``'s
    message (the closest names) for a name not in the catalogue."""
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(unknown_op(name)) from None
