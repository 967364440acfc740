"""What one catalogue entry is: ``Op`` (an op's JAX and torch expressions,
inputs, shape sets, variants, tolerance class and budget), its ``Arg`` and
``ShapeSet``, the tolerance classes, and the shorthands the family modules
share.

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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Callable

from conformance.records.entries import Tolerance


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


def tolerance(tol_class: str, device: str = "cpu", dtype: str = "float32") -> Tolerance:
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
    stratified sampling. ``fixed``: the layout combinations of an
    ``explicit`` op (run on the ``2x4`` mesh with Explicit axes).
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
    # Fixed layout combinations (one case-file layout list per input) instead
    # of sampled ones; group ``explicit`` only (``catalogue.explicit``).
    fixed: tuple[tuple[tuple[str | None, ...], ...], ...] = ()

    def compile(self, backend: str, namespace: Mapping[str, Any],
                kwarg_names: Sequence[str], raw: bool = False) -> Callable[..., Any]:
        """The callable ``f(a, b, c, **kwargs)`` for ``backend`` ("jax"/"torch")."""
        expr = self.jax if backend == "jax" else (
            self.raw_torch if raw and self.raw_torch else self.torch)
        params = ", ".join(["a=None", "b=None", "c=None"] + [f"{k}=None" for k in kwarg_names])
        return eval(f"lambda {params}: {expr}", dict(namespace))  # noqa: S307 - our own table


F32, I32, BOOL = Arg(), Arg("int32", "index:8"), Arg("bool", "bool")
POS, NONZERO, SMALL = Arg(domain="positive"), Arg(domain="nonzero"), Arg(domain="small")

# Two array shape families: divisible by every mesh and indivisible (one
# input; two inputs, also broadcast).
M2 = (ShapeSet("div", ((8, 16),)), ShapeSet("indiv", ((6, 10),), False))
M2x2 = (
    ShapeSet("div", ((8, 16), (8, 16))),
    ShapeSet("bcast", ((8, 16), (16,))),
    ShapeSet("indiv", ((6, 10), (6, 10)), False),
)

# The default budget of the JAX twins of PyTorch OpInfo ops (each family's
# ``_opinfo_twins``): layout combinations per mesh (8,), (2,4), (2,2,2), on
# divisible shapes only. The expression is the same function on both sides
# (same defaults, rounding, ``ddof``/``correction``...), not an
# approximation; where the two libraries differ in a default, it states the
# argument on both sides. The broader entries (several shape sets,
# indivisible ones included) set their own, larger budgets.
TWIN_BUDGET = (1, 2, 1)
