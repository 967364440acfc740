"""Run one case on the JAX reference. Never imports torch.

Each op runs under ``jax.jit`` on arrays placed on a mesh with *explicit*
axis types (sharding in types): outputs carry ``"rule": "typed"``. When JAX
refuses the op with its sharding type error (ambiguous), the case runs again
on a mesh with *auto* axis types, as Keras does, and outputs carry
``"rule": "chosen"`` (the compiler's choice; not normative).

Everything that touches meshes and placements goes through
``parity.jax_ref``'s public functions: ``to_jax_mesh``, ``distribute_tensor``
(``axis_types`` explicit or auto), ``describe`` for concrete arrays and
``describe_sharding`` for the sharding of a traced or compiled output. There
is no substitute: without ``parity.jax_ref`` the worker does not start.
"""

from __future__ import annotations

import json
import os
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy as np

import parity
from conformance.catalogue import Op
from conformance.records.values import host_values
from conformance.running.case_runner import CaseRunner, array_record, spec_entries


def setup(n_devices: int, device: str = "cpu") -> dict[str, Any]:
    """Make JAX see ``n_devices`` CPU devices (before JAX starts); header facts.

    Raises ``RuntimeError`` for a device other than CPU, when
    ``parity.jax_ref`` cannot be imported (JAX missing), or when JAX sees
    fewer devices than asked.
    """
    if device != "cpu":
        raise RuntimeError("the JAX reference runs on CPU (--device cpu)")
    flags = os.environ.get("XLA_FLAGS", "")
    # One thread, and a cheap backend compile: the cases are tiny, compiling
    # them dominates (sharding propagation runs before these passes).
    os.environ["XLA_FLAGS"] = (flags + " --xla_cpu_multi_thread_eigen=false "
                               "intra_op_parallelism_threads=1 --xla_backend_optimization_level=0 "
                               "--xla_llvm_disable_expensive_passes=true").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        from parity import jax_ref
    except ImportError as err:
        raise RuntimeError(f"the JAX reference needs parity.jax_ref, which does not import "
                           f"({err}); install JAX: pip install 'parity[jax]'") from err
    jax_ref.simulate(n_devices)
    import jax

    jax.config.update("jax_platforms", "cpu")
    if len(jax.devices()) < n_devices:
        raise RuntimeError(f"JAX sees {len(jax.devices())} devices, need {n_devices}")
    return {"api": "parity.jax_ref", "semantics": "reference (explicit axis types; auto on ambiguity)",
            "versions": {"jax": jax.__version__, "jaxlib": _version("jaxlib")}}


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


class JaxRunner(CaseRunner):
    """Executes case dicts (``Case.to_json()``) and returns report entries."""

    def __init__(self, n_devices: int, device: str = "cpu") -> None:
        import jax
        import jax.numpy as jnp
        from jax import lax

        from parity import jax_ref

        self.jax, self.jnp, self.ref = jax, jnp, jax_ref
        self.backend = jax_ref
        self.device = device
        self.n = n_devices
        self._programs: dict[tuple, Any] = {}
        # True: run every case sharded (compile per layout; slow, exact
        # reference of the values too). False: typed trace + unsharded values.
        self.sharded_values = os.environ.get("PARITY_JAX_SHARDED_VALUES") == "1"
        self.ns = {"jnp": jnp, "jax": jax, "lax": lax, "nn": jax.nn, "np": np, "B": jax_ref}

    def _describe_type(self, sharding, shape, dtype, mesh) -> parity.Placement:
        """Placement of an output whose sharding was traced or compiled
        (possibly on the abstract mesh): its spec on the concrete ``mesh``."""
        from jax.sharding import NamedSharding

        return self.ref.describe_sharding(NamedSharding(mesh, sharding.spec), shape, dtype)

    # ------------------------------------------------------------ cases
    def _execute(self, case: dict[str, Any], op: Op) -> dict[str, Any]:
        hosts = host_values(case)
        if op.group == "api":
            return self._run_api(case, op, hosts)
        if op.group == "explicit":
            return self._run_explicit(case, op, hosts)
        if case["mesh"].get("axis_types") is not None:
            # The case's own axis types, on both sides: no auto rerun.
            return self._run_op(case, op, hosts, None)
        try:
            return self._run_op(case, op, hosts, "explicit")
        except Exception as err:  # noqa: BLE001 - decided by the auto rerun below
            # Explicit mode refused the op. Only the axis types differ in
            # the rerun, so if auto mode runs it, the refusal was about
            # sharding (ShardingTypeError, or matmul's "Incompatible
            # types" for differently sharded batch dims): Keras's choice.
            try:
                entry = self._run_op(case, op, hosts, "auto")
            except Exception:  # noqa: BLE001 - the explicit error is the answer
                raise err from None
            entry["notes"] = [f"explicit mode refused ({type(err).__name__}): "
                              f"{str(err).splitlines()[0][:300]}"]
            return entry

    def _run_op(self, case, op, hosts, axis_types: str) -> dict[str, Any]:
        jax = self.jax
        pmesh = self.mesh(case)
        mesh = self.ref.to_jax_mesh(pmesh, axis_types)
        own = axis_types is None  # the case's mesh.axis_types
        if own:
            axis_types = ("explicit" if all(t is parity.AxisType.Explicit for t in pmesh.axis_types)
                          else "auto")
        rule = "typed" if axis_types == "explicit" else "chosen"
        kwargs = dict(case.get("kwargs", {}))
        arrays, slots = [], []  # traced operands and where they go
        for item, host in zip(case["inputs"], hosts):
            if "scalar" in item:
                slots.append(("const", item["scalar"]))
                continue
            slots.append(("arg", len(arrays)))
            if item.get("layout") is None:
                arrays.append(host)
            else:
                arrays.append(jax.device_put(host, jax.sharding.NamedSharding(
                    mesh, self.ref.to_partition_spec(self.layout(item["layout"], pmesh).spec)))
                    if own else self.ref.distribute_tensor(
                        host, self.layout(item["layout"], pmesh), axis_types=axis_types))
        float_args = tuple(k for k, a in enumerate(arrays)
                           if np.issubdtype(np.dtype(a.dtype), np.floating))
        want_grad = bool(case.get("grad")) and op.grad and bool(float_args)
        both = self._program(op, kwargs, tuple(slots), float_args if want_grad else ())
        unsharded = [np.asarray(h) for h in hosts if h is not None]

        if self.sharded_values:
            with jax.set_mesh(mesh):
                out_vals, grad_vals = jax.jit(both)(*arrays)
            out_pl = [self._placement(o) for o in jax.tree_util.tree_leaves(out_vals)]
            grad_pl = [self._placement(g) for g in grad_vals]
        elif axis_types == "explicit":
            # Sharding in types: the output shardings are the traced types (no
            # compile); values come from the same program run unsharded, whose
            # compile is shared by every layout of this op and shape.
            with jax.set_mesh(mesh):
                info = jax.jit(both).trace(*arrays).out_info
            out_vals, grad_vals = jax.jit(both)(*unsharded)
            out_types = jax.tree_util.tree_leaves(info[0])
            out_pl = [self._describe_type(t.sharding, t.shape, t.dtype, mesh) for t in out_types]
            grad_pl = [self._describe_type(t.sharding, t.shape, t.dtype, mesh) for t in info[1]]
        else:
            # Auto axis types: the compiler chooses; compile only to read its
            # choice, values again from the shared unsharded program.
            with jax.set_mesh(mesh):
                compiled = jax.jit(both).lower(*arrays).compile()
            out_sh, grad_sh = compiled.output_shardings
            out_vals, grad_vals = jax.jit(both)(*unsharded)
            out_pl = [self._describe_type(sh, np.shape(v), v.dtype, mesh) for sh, v in
                      zip(jax.tree_util.tree_leaves(out_sh), jax.tree_util.tree_leaves(out_vals))]
            grad_pl = [self._describe_type(sh, np.shape(v), v.dtype, mesh)
                       for sh, v in zip(grad_sh, grad_vals)]
        outputs = [array_record(v, pl, rule)
                   for v, pl in zip(jax.tree_util.tree_leaves(out_vals), out_pl)]
        host_inputs = [i for i, item in enumerate(case["inputs"]) if "scalar" not in item]
        grads = []
        for k, v, pl in zip(float_args if want_grad else (), grad_vals, grad_pl):
            index = host_inputs[k]
            is_host = case["inputs"][index].get("layout") is None
            rec = array_record(v, None if is_host else pl, None if is_host else rule)
            rec["input"] = index
            grads.append(rec)
        return {"outputs": outputs, "grads": grads}

    def _placement(self, x) -> parity.Placement:
        return self.ref.describe(x)

    def _program(self, op, kwargs, slots, grad_args):
        """``f(*arrays) -> (outputs, grads of sum(outputs))``, one function
        object per op, kwargs, operand slots and grad args (so jit caches)."""
        key = (op.name, json.dumps(kwargs, sort_keys=True), slots, grad_args)
        found = self._programs.get(key)
        if found is not None:
            return found
        jax, jnp = self.jax, self.jnp
        fn = op.compile("jax", self.ns, list(kwargs))

        def call(*xs):
            args = [xs[v] if kind == "arg" else v for kind, v in slots]
            return fn(*args, **kwargs)

        def total(*xs):
            leaves = jax.tree_util.tree_leaves(call(*xs))
            return sum(jnp.sum(leaf) for leaf in leaves)

        def both(*xs):
            out = call(*xs)
            grads = jax.grad(total, argnums=grad_args)(*xs) if grad_args else ()
            return out, grads

        self._programs[key] = both
        return both

    def _run_explicit(self, case, op, hosts) -> dict[str, Any]:
        """Group ``explicit``: eager, under ``set_mesh`` of the case's mesh
        (its own axis types), operands by ``device_put(host, P(...))``;
        every output and gradient records ``str(typeof(x))``."""
        jax, jnp, ref = self.jax, self.jnp, self.ref
        pmesh = self.mesh(case)
        kwargs = dict(case.get("kwargs", {}))
        if "target" in kwargs:
            kwargs["target"] = spec_entries(kwargs["target"])
        fn = op.compile("jax", {**self.ns, "P": parity.P}, list(kwargs))
        with ref.set_mesh(pmesh):
            arrays = [ref.device_put(h, parity.P(*spec_entries(item["layout"])))
                      for item, h in zip(case["inputs"], hosts)]
            leaves = jax.tree_util.tree_leaves(fn(*arrays, **kwargs))
            grads = ()
            if case.get("grad") and op.grad:
                def total(*xs):
                    return sum(jnp.sum(v) for v in jax.tree_util.tree_leaves(fn(*xs, **kwargs)))
                grads = jax.grad(total, argnums=tuple(range(len(arrays))))(*arrays)
        outputs = [self._typed(v) for v in leaves]
        grad_recs = []
        for i, g in enumerate(grads):
            rec = self._typed(g)
            rec["input"] = i
            grad_recs.append(rec)
        return {"outputs": outputs, "grads": grad_recs}

    def _typed(self, x) -> dict[str, Any]:
        rec = array_record(np.asarray(x), self._placement(x), "typed")
        rec["type"] = str(self.ref.typeof(x))
        return rec

    def _run_api(self, case, op, hosts) -> dict[str, Any]:
        pmesh = self.mesh(case)
        item, host = case["inputs"][0], hosts[0]
        kwargs = dict(case.get("kwargs", {}))
        if "target" in kwargs:
            kwargs["target"] = self.layout(kwargs["target"], pmesh)
        x = host if item.get("layout") is None else self.ref.distribute_tensor(
            host, self.layout(item["layout"], pmesh))
        out = op.compile("jax", self.ns, list(kwargs))(x, **kwargs)
        return {"outputs": [array_record(out, self._placement(out), "typed")], "grads": []}


__all__ = ["JaxRunner", "setup"]
