"""Do a case's input shapes and kwargs fit its op? Asked of JAX itself:
``jax.eval_shape`` of the op's reference expression on the global
(unsharded) shapes, so the answer is exact for every op of the catalogue
and costs no compile.

Checked when a case file is read (``cases.load_case_file``) and for the
default catalogue by a test. API functions (``distribute_tensor``,
collectives) are not checked here: a wrong ``axis`` or ``axis_name`` there
is a case the backends must reject (``invalid-layout``).
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np

from conformance.catalogue import get_op


class UnfitCase(ValueError):
    """The inputs or kwargs of a case do not fit its op."""


@functools.cache
def _jax_namespace() -> dict[str, Any] | None:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    return {"jnp": jnp, "jax": jax, "lax": jax.lax, "nn": jax.nn, "np": np}


def jax_available() -> bool:
    """Whether shapes can be checked here (JAX imports)."""
    return _jax_namespace() is not None


def check_fit(case: dict[str, Any]) -> None:
    """Raise ``UnfitCase`` naming the shapes and JAX's reason when ``case``
    (``Case.to_json()``) cannot run on its op even unsharded.

    Raises ``RuntimeError`` when JAX is not installed (call
    ``jax_available()`` first).
    """
    op = get_op(case["op"])
    if op.group in ("api", "explicit"):  # expressions that need a mesh (set_mesh, B)
        return
    ns = _jax_namespace()
    if ns is None:
        raise RuntimeError("checking shapes needs JAX (pip install 'parity[jax]')")
    jax = ns["jax"]
    kwargs = dict(case.get("kwargs", {}))
    fn = op.compile("jax", ns, list(kwargs))
    structs, slots = [], []
    for item in case["inputs"]:
        if "scalar" in item:
            slots.append(("const", item["scalar"]))
        else:
            slots.append(("arg", len(structs)))
            structs.append(jax.ShapeDtypeStruct(tuple(item["shape"]), item.get("dtype", "float32")))

    def call(*xs):
        return fn(*[xs[v] if kind == "arg" else v for kind, v in slots], **kwargs)

    try:
        jax.eval_shape(call, *structs)
    except Exception as err:  # noqa: BLE001 - any refusal of the reference is the answer
        shapes = ", ".join("scalar" if "scalar" in i else str(list(i["shape"]))
                           for i in case["inputs"])
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
        raise UnfitCase(f"inputs ({shapes}) with kwargs {kwargs} do not fit {op.name}: "
                        f"JAX says {type(err).__name__}: {first}") from None


def warn_unchecked(stream=sys.stderr) -> None:
    """The one line said when shapes cannot be checked."""
    print("parity: JAX is not installed here, so case shapes are not checked before the "
          "run (arity and kwargs are)", file=stream)
