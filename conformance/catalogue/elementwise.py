"""Elementwise ops (groups ``unary`` and ``binary``): the broad entries
(several shape sets, broadcasting, host-array and Python-scalar operands)
and the JAX twins of PyTorch OpInfo ops: unary math and activations, binary
math, comparisons, logical and bitwise ops.

Domains: an op defined on part of the line takes its input from a domain
(``positive``, ``nonzero``) or a scaling written on both sides (``a / 2.5``
maps ``small`` (-2..2) into (-1, 1) for ``arcsin``); the scaling is the same
elementwise multiply on both sides, so the op itself is what is compared.
"""

from __future__ import annotations

from conformance.catalogue.entry import (BOOL, F32, M2, NONZERO, POS, SMALL,
                                         TWIN_BUDGET, Arg, M2x2, Op, ShapeSet)

_BROAD_UNARY = [
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

_BROAD_BINARY = [
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


def _broad() -> list[Op]:
    ops = [Op(name, "unary", jx, tx, (arg,), M2, tol=tol, budget=(3, 6, 6))
           for name, jx, tx, arg, tol in _BROAD_UNARY]
    ops += [Op(name, "binary", jx, tx, args, M2x2, tol=tol, mixed=True, budget=(4, 6, 6))
            for name, jx, tx, args, tol in _BROAD_BINARY]
    ops.append(Op(
        "where", "binary", "jnp.where(a, b, c)", "torch.where(a, b, c)", (BOOL, F32, F32),
        (ShapeSet("div", ((8, 16), (8, 16), (8, 16))),
         ShapeSet("bcast", ((8, 16), (8, 16), (16,))),
         ShapeSet("indiv", ((6, 10), (6, 10), (6, 10)), False)),
        tol="exact", mixed=True, budget=(4, 6, 6)))
    return ops


# (name, jax, torch, domain, tolerance class, differentiable)
_UNARY = [
    ("ceil", "jnp.ceil(a)", "torch.ceil(a)", "normal", "exact", True),
    ("floor", "jnp.floor(a)", "torch.floor(a)", "normal", "exact", True),
    ("round", "jnp.round(a * 2)", "torch.round(a * 2)", "normal", "exact", True),
    ("trunc", "jnp.trunc(a)", "torch.trunc(a)", "normal", "exact", True),
    ("fix", "jnp.trunc(a)", "torch.fix(a)", "normal", "exact", True),
    ("sign", "jnp.sign(a)", "torch.sign(a)", "normal", "exact", True),
    ("sgn", "jnp.sign(a)", "torch.sgn(a)", "normal", "exact", True),
    ("positive", "jnp.positive(a)", "torch.positive(a)", "normal", "exact", True),
    ("sin", "jnp.sin(a)", "torch.sin(a)", "normal", "transcendental", True),
    ("cos", "jnp.cos(a)", "torch.cos(a)", "normal", "transcendental", True),
    ("tan", "jnp.tan(a / 2.5)", "torch.tan(a / 2.5)", "small", "transcendental", True),
    ("arcsin", "jnp.arcsin(a / 2.5)", "torch.asin(a / 2.5)", "small", "transcendental", True),
    ("arccos", "jnp.arccos(a / 2.5)", "torch.acos(a / 2.5)", "small", "transcendental", True),
    ("arctan", "jnp.arctan(a)", "torch.atan(a)", "normal", "transcendental", True),
    ("sinh", "jnp.sinh(a)", "torch.sinh(a)", "small", "transcendental", True),
    ("cosh", "jnp.cosh(a)", "torch.cosh(a)", "small", "transcendental", True),
    ("arcsinh", "jnp.arcsinh(a)", "torch.asinh(a)", "normal", "transcendental", True),
    ("arccosh", "jnp.arccosh(a + 1)", "torch.acosh(a + 1)", "positive", "transcendental", True),
    ("arctanh", "jnp.arctanh(a / 2.5)", "torch.atanh(a / 2.5)", "small", "transcendental",
     True),
    ("exp2", "jnp.exp2(a)", "torch.exp2(a)", "small", "transcendental", True),
    ("expm1", "jnp.expm1(a)", "torch.expm1(a)", "small", "transcendental", True),
    ("log2", "jnp.log2(a)", "torch.log2(a)", "positive", "transcendental", True),
    ("log10", "jnp.log10(a)", "torch.log10(a)", "positive", "transcendental", True),
    ("log1p", "jnp.log1p(a)", "torch.log1p(a)", "positive", "transcendental", True),
    ("reciprocal", "jnp.reciprocal(a)", "torch.reciprocal(a)", "nonzero", "elementwise", True),
    ("rsqrt", "lax.rsqrt(a)", "torch.rsqrt(a)", "positive", "transcendental", True),
    ("erf", "lax.erf(a)", "torch.erf(a)", "normal", "transcendental", True),
    ("erfc", "lax.erfc(a)", "torch.erfc(a)", "normal", "transcendental", True),
    ("erfinv", "lax.erf_inv(a / 2.5)", "torch.erfinv(a / 2.5)", "small", "transcendental",
     True),
    ("lgamma", "lax.lgamma(a)", "torch.lgamma(a)", "positive", "transcendental", True),
    ("digamma", "lax.digamma(a)", "torch.digamma(a)", "positive", "transcendental", True),
    ("i0", "jnp.i0(a)", "torch.i0(a)", "small", "transcendental", False),
    ("sinc", "jnp.sinc(a)", "torch.sinc(a)", "normal", "transcendental", True),
    ("deg2rad", "jnp.deg2rad(a)", "torch.deg2rad(a)", "normal", "elementwise", True),
    ("rad2deg", "jnp.rad2deg(a)", "torch.rad2deg(a)", "normal", "elementwise", True),
    ("nan_to_num", "jnp.nan_to_num(jnp.log(a + 1))", "torch.nan_to_num(torch.log(a + 1))",
     "normal", "transcendental", False),
    ("clip", "jnp.clip(a, -0.5, 0.5)", "torch.clamp(a, -0.5, 0.5)", "normal", "exact", True),
    ("softplus", "nn.softplus(a)", "F.softplus(a)", "normal", "transcendental", True),
    ("silu", "nn.silu(a)", "F.silu(a)", "normal", "transcendental", True),
    ("elu", "nn.elu(a)", "F.elu(a)", "normal", "transcendental", True),
    ("selu", "nn.selu(a)", "F.selu(a)", "normal", "transcendental", True),
    ("celu", "nn.celu(a)", "F.celu(a)", "normal", "transcendental", True),
    ("leaky_relu", "nn.leaky_relu(a, negative_slope=0.01)",
     "F.leaky_relu(a, negative_slope=0.01)", "normal", "exact", True),
    ("hard_tanh", "nn.hard_tanh(a)", "F.hardtanh(a)", "normal", "exact", True),
    ("relu6", "nn.relu6(a * 4)", "F.relu6(a * 4)", "normal", "exact", True),
    ("hard_sigmoid", "nn.hard_sigmoid(a * 4)", "F.hardsigmoid(a * 4)", "normal",
     "elementwise", True),
    ("hard_swish", "nn.hard_swish(a * 4)", "F.hardswish(a * 4)", "normal", "elementwise", True),
    ("log_sigmoid", "nn.log_sigmoid(a)", "F.logsigmoid(a)", "normal", "transcendental", True),
    ("mish", "nn.mish(a)", "F.mish(a)", "normal", "transcendental", True),
    ("soft_sign", "nn.soft_sign(a)", "F.softsign(a)", "normal", "elementwise", True),
    ("gelu_tanh", "nn.gelu(a, approximate=True)", "F.gelu(a, approximate='tanh')", "normal",
     "transcendental", True),
    ("isfinite", "jnp.isfinite(jnp.log(a))", "torch.isfinite(torch.log(a))", "normal",
     "exact", False),
    ("isnan", "jnp.isnan(jnp.log(a))", "torch.isnan(torch.log(a))", "normal", "exact", False),
    ("signbit", "jnp.signbit(a)", "torch.signbit(a)", "normal", "exact", False),
]

# (name, jax, torch, (domain a, domain b), tolerance class, differentiable)
_BINARY = [
    ("arctan2", "jnp.arctan2(a, b)", "torch.atan2(a, b)", ("normal", "nonzero"),
     "transcendental", True),
    ("hypot", "jnp.hypot(a, b)", "torch.hypot(a, b)", ("normal", "normal"), "elementwise", True),
    ("fmod", "jnp.fmod(a, b)", "torch.fmod(a, b)", ("normal", "nonzero"), "elementwise", True),
    ("remainder", "jnp.remainder(a, b)", "torch.remainder(a, b)", ("normal", "nonzero"),
     "elementwise", True),
    ("floor_divide", "jnp.floor_divide(a, b)", "torch.floor_divide(a, b)",
     ("normal", "nonzero"), "exact", False),
    ("true_divide", "jnp.true_divide(a, b)", "torch.true_divide(a, b)", ("normal", "nonzero"),
     "elementwise", True),
    ("copysign", "jnp.copysign(a, b)", "torch.copysign(a, b)", ("normal", "normal"), "exact",
     True),
    ("nextafter", "jnp.nextafter(a, b)", "torch.nextafter(a, b)", ("normal", "normal"), "exact",
     False),
    ("logaddexp", "jnp.logaddexp(a, b)", "torch.logaddexp(a, b)", ("normal", "normal"),
     "transcendental", True),
    ("logaddexp2", "jnp.logaddexp2(a, b)", "torch.logaddexp2(a, b)", ("normal", "normal"),
     "transcendental", True),
    ("fmax", "jnp.fmax(a, b)", "torch.fmax(a, b)", ("normal", "normal"), "exact", True),
    ("fmin", "jnp.fmin(a, b)", "torch.fmin(a, b)", ("normal", "normal"), "exact", True),
    ("heaviside", "jnp.heaviside(jnp.round(a), b)", "torch.heaviside(torch.round(a), b)",
     ("normal", "normal"), "exact", False),
    ("equal", "jnp.equal(jnp.round(a), jnp.round(b))",
     "torch.eq(torch.round(a), torch.round(b))", ("normal", "normal"), "exact", False),
    ("not_equal", "jnp.not_equal(jnp.round(a), jnp.round(b))",
     "torch.ne(torch.round(a), torch.round(b))", ("normal", "normal"), "exact", False),
    ("greater", "jnp.greater(a, b)", "torch.gt(a, b)", ("normal", "normal"), "exact", False),
    ("greater_equal", "jnp.greater_equal(a, b)", "torch.ge(a, b)", ("normal", "normal"),
     "exact", False),
    ("less", "jnp.less(a, b)", "torch.lt(a, b)", ("normal", "normal"), "exact", False),
    ("less_equal", "jnp.less_equal(a, b)", "torch.le(a, b)", ("normal", "normal"), "exact",
     False),
    ("isclose", "jnp.isclose(jnp.round(a), jnp.round(b))",
     "torch.isclose(torch.round(a), torch.round(b))", ("normal", "normal"), "exact", False),
]

_LOGICAL = [
    ("logical_and", "jnp.logical_and(a, b)", "torch.logical_and(a, b)"),
    ("logical_or", "jnp.logical_or(a, b)", "torch.logical_or(a, b)"),
    ("logical_xor", "jnp.logical_xor(a, b)", "torch.logical_xor(a, b)"),
]

_BITWISE = [
    ("bitwise_and", "jnp.bitwise_and(a, b)", "torch.bitwise_and(a, b)"),
    ("bitwise_or", "jnp.bitwise_or(a, b)", "torch.bitwise_or(a, b)"),
    ("bitwise_xor", "jnp.bitwise_xor(a, b)", "torch.bitwise_xor(a, b)"),
    ("left_shift", "jnp.left_shift(a, b)", "torch.bitwise_left_shift(a, b)"),
    ("right_shift", "jnp.right_shift(a, b)", "torch.bitwise_right_shift(a, b)"),
]


def _opinfo_twins() -> list[Op]:
    one = (ShapeSet("div", ((8, 16),)),)
    two = (ShapeSet("div", ((8, 16), (8, 16))), ShapeSet("bcast", ((8, 16), (16,))))
    out = []
    for name, jx, tx, domain, tol, grad in _UNARY:
        out.append(Op(name, "unary", jx, tx, (Arg(domain=domain),), one, tol=tol, grad=grad,
                      budget=TWIN_BUDGET))
    for name, jx, tx, (da, db), tol, grad in _BINARY:
        out.append(Op(name, "binary", jx, tx, (Arg(domain=da), Arg(domain=db)), two, tol=tol,
                      grad=grad, budget=TWIN_BUDGET))
    for name, jx, tx in _LOGICAL:
        out.append(Op(name, "binary", jx, tx, (Arg("bool", "bool"), Arg("bool", "bool")), two,
                      tol="exact", grad=False, budget=TWIN_BUDGET))
    out.append(Op("logical_not", "unary", "jnp.logical_not(a)", "torch.logical_not(a)",
                  (Arg("bool", "bool"),), one, tol="exact", grad=False, budget=TWIN_BUDGET))
    small_int = Arg("int32", "index:8")
    for name, jx, tx in _BITWISE:
        out.append(Op(name, "binary", jx, tx, (small_int, Arg("int32", "index:4")), two,
                      tol="exact", grad=False, budget=TWIN_BUDGET))
    out.append(Op("bitwise_not", "unary", "jnp.bitwise_not(a)", "torch.bitwise_not(a)",
                  (small_int,), one, tol="exact", grad=False, budget=TWIN_BUDGET))
    out.append(Op("clamp_tensor", "binary", "jnp.clip(a, b, b + 1.0)",
                  "torch.clamp(a, b, b + 1.0)", (Arg(), Arg()), two, tol="exact",
                  budget=TWIN_BUDGET, doc="clamp with tensor bounds [b, b + 1]"))
    return out


OPS: tuple[Op, ...] = (*_broad(), *_opinfo_twins())
