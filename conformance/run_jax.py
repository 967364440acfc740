"""Run one case on the JAX reference. Never imports torch.

Each op runs under ``jax.jit`` on arrays placed on a mesh with *explicit*
axis types (sharding in types): outputs carry ``"rule": "typed"``. When JAX
refuses the op with its sharding type error (ambiguous), the case runs again
on a mesh with *auto* axis types, as Keras does, and outputs carry
``"rule": "chosen"`` (the compiler's choice; not normative).

Placements are read from JAX itself: ``sharding.devices_indices_map`` gives
which slice each device holds; device index ``i`` is ``mesh.devices.flat[i]``.
The API functions of SPEC (``distribute_tensor``, collectives...) run through
``parity.jax_ref``; while that module is missing, through the small
``_FallbackApi`` below (recorded in the report header as ``api``).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from conformance.catalogue import GRAD_CLASS, get_op, tolerance
from conformance.errors import categorize, error_record
from conformance.values import encode, host_values


def setup(n_devices: int, device: str = "cpu") -> dict[str, Any]:
    """Make JAX see ``n_devices`` CPU devices (before JAX starts); header facts."""
    if device != "cpu":
        raise RuntimeError("the JAX reference runs on CPU (--device cpu)")
    flags = os.environ.get("XLA_FLAGS", "")
    # One thread, and a cheap backend compile: the cases are tiny, compiling
    # them dominates (sharding propagation runs before these passes).
    os.environ["XLA_FLAGS"] = (flags + " --xla_cpu_multi_thread_eigen=false "
                               "intra_op_parallelism_threads=1 --xla_backend_optimization_level=0 "
                               "--xla_llvm_disable_expensive_passes=true").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    api = "parity.jax_ref"
    try:
        from parity import jax_ref

        jax_ref.simulate(n_devices)
    except ImportError:
        api = "conformance fallback (parity.jax_ref not importable)"
        os.environ["XLA_FLAGS"] += f" --xla_force_host_platform_device_count={n_devices}"
    import jax

    jax.config.update("jax_platforms", "cpu")
    if len(jax.devices()) < n_devices:
        raise RuntimeError(f"JAX sees {len(jax.devices())} devices, need {n_devices}")
    return {"api": api, "semantics": "reference (explicit axis types; auto on ambiguity)",
            "versions": {"jax": jax.__version__, "jaxlib": _version("jaxlib")}}


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


class JaxRunner:
    """Executes case dicts (``Case.to_json()``) and returns report entries."""

    def __init__(self, n_devices: int, device: str = "cpu") -> None:
        import jax
        import jax.numpy as jnp
        from jax import lax

        self.jax, self.jnp = jax, jnp
        self.device = device
        self.n = n_devices
        self._meshes: dict[tuple, Any] = {}
        self._programs: dict[tuple, Any] = {}
        # True: run every case sharded (compile per layout; slow, exact
        # reference of the values too). False: typed trace + unsharded values.
        self.sharded_values = os.environ.get("PARITY_JAX_SHARDED_VALUES") == "1"
        self.api = self._api_module()
        self.ns = {"jnp": jnp, "jax": jax, "lax": lax, "nn": jax.nn, "np": np, "B": self.api}

    def _api_module(self):
        try:
            from parity import jax_ref

            return jax_ref
        except ImportError:
            return _FallbackApi(self)

    # ------------------------------------------------------------ meshes
    def mesh(self, shape: tuple[int, ...], names: tuple[str, ...], explicit: bool):
        key = (shape, names, explicit)
        if key not in self._meshes:
            from jax.sharding import AxisType, Mesh

            kind = AxisType.Explicit if explicit else AxisType.Auto
            devices = np.array(self.jax.devices()[: int(np.prod(shape))]).reshape(shape)
            self._meshes[key] = Mesh(devices, names, axis_types=(kind,) * len(shape))
        return self._meshes[key]

    def put(self, host: np.ndarray, spec, mesh):
        from jax.sharding import NamedSharding, PartitionSpec

        entries = [None if not n else n[0] if len(n) == 1 else tuple(n) for n in spec]
        return self.jax.device_put(host, NamedSharding(mesh, PartitionSpec(*entries)))

    # ------------------------------------------------------------ cases
    def run(self, case: dict[str, Any]) -> dict[str, Any]:
        start = time.perf_counter()
        op = get_op(case["op"])
        out_dtype_hint = "float32"
        entry: dict[str, Any] = {"status": "ok", "error": None, "outputs": [], "grads": []}
        try:
            hosts = host_values(case)
            if op.group == "api":
                entry.update(self._run_api(case, op, hosts))
            else:
                try:
                    entry.update(self._run_op(case, op, hosts, explicit=True))
                except Exception as err:  # noqa: BLE001
                    # Explicit mode refused the op. Only the axis types differ in
                    # the rerun, so if auto mode runs it, the refusal was about
                    # sharding (ShardingTypeError, or matmul's "Incompatible
                    # types" for differently sharded batch dims): Keras's choice.
                    try:
                        entry.update(self._run_op(case, op, hosts, explicit=False))
                    except Exception:  # noqa: BLE001 - the explicit error is the answer
                        raise err from None
                    entry["notes"] = [f"explicit mode refused ({type(err).__name__}): "
                                      f"{str(err).splitlines()[0][:300]}"]
        except Exception as err:  # noqa: BLE001 - every failure is a recorded result
            entry = {"status": "error", "error": error_record(err), "outputs": [], "grads": []}
        if entry["outputs"]:
            out_dtype_hint = entry["outputs"][0]["dtype"]
        tol = tolerance(op.tol, self.device, out_dtype_hint)
        entry["tolerance"] = tol
        if case.get("grad"):
            entry["grad_tolerance"] = tolerance(GRAD_CLASS[op.tol], self.device)
        entry["seconds"] = round(time.perf_counter() - start, 4)
        return entry

    def _run_op(self, case, op, hosts, explicit: bool) -> dict[str, Any]:
        jax, jnp = self.jax, self.jnp
        shape = tuple(case["mesh"]["shape"])
        names = tuple(case["mesh"]["axis_names"])
        mesh = self.mesh(shape, names, explicit)
        rule = "typed" if explicit else "chosen"
        kwargs = dict(case.get("kwargs", {}))
        fn = op.compile("jax", self.ns, list(kwargs))
        arrays, slots = [], []  # traced operands and where they go
        for i, (item, host) in enumerate(zip(case["inputs"], hosts)):
            if "scalar" in item:
                slots.append(("const", item["scalar"]))
            elif item.get("layout") is None:
                slots.append(("arg", len(arrays)))
                arrays.append(host)
            else:
                spec = _spec(item["layout"])
                slots.append(("arg", len(arrays)))
                arrays.append(self.put(host, spec, mesh))
        float_args = tuple(k for k, a in enumerate(arrays)
                           if np.issubdtype(np.dtype(a.dtype), np.floating))
        want_grad = bool(case.get("grad")) and op.grad and bool(float_args)
        both = self._program(op, kwargs, tuple(slots), float_args if want_grad else ())
        host_inputs = [i for i, item in enumerate(case["inputs"]) if "scalar" not in item]

        if explicit and not self.sharded_values:
            # Sharding in types: the output shardings are the traced types (no
            # compile); values come from the same program run unsharded, whose
            # compile is shared by every layout of this op and shape.
            with jax.set_mesh(mesh):
                info = jax.jit(both).trace(*arrays).out_info
            out_vals, grad_vals = jax.jit(both)(*[np.asarray(h) for h in hosts if h is not None])
            out_leaves = zip(jax.tree_util.tree_leaves(info), jax.tree_util.tree_leaves(out_vals))
            outputs = [self.record(v, placement_from_type(t, mesh), rule) for t, v in out_leaves]
            grad_records = []
            for k, t, v in zip(float_args, info[1], grad_vals):
                index = host_inputs[k]
                is_host = case["inputs"][index].get("layout") is None
                rec = self.record(v, None if is_host else placement_from_type(t, mesh), rule)
                rec["input"] = index
                grad_records.append(rec)
            return {"outputs": outputs, "grads": grad_records}

        if self.sharded_values:
            with jax.set_mesh(mesh):
                out, grads = jax.jit(both)(*arrays)
            out_pl = [placement_of(o, mesh) for o in jax.tree_util.tree_leaves(out)]
            grad_pl = [placement_of(g, mesh) for g in grads]
            out_vals, grad_vals = out, grads
        else:
            # Auto axis types: the compiler chooses; compile only to read its
            # choice, values again from the shared unsharded program.
            with jax.set_mesh(mesh):
                compiled = jax.jit(both).lower(*arrays).compile()
            out_sh, grad_sh = compiled.output_shardings
            out_vals, grad_vals = jax.jit(both)(*[np.asarray(h) for h in hosts if h is not None])
            out_pl = [placement_from_sharding(sh, np.shape(v), mesh) for sh, v in
                      zip(jax.tree_util.tree_leaves(out_sh), jax.tree_util.tree_leaves(out_vals))]
            grad_pl = [placement_from_sharding(sh, np.shape(v), mesh) for sh, v in zip(grad_sh, grad_vals)]
        outputs = [self.record(v, pl, rule)
                   for v, pl in zip(jax.tree_util.tree_leaves(out_vals), out_pl)]
        grad_records = []
        for k, v, pl in zip(float_args, grad_vals, grad_pl):
            index = host_inputs[k]
            is_host = case["inputs"][index].get("layout") is None
            rec = self.record(v, None if is_host else pl, rule)
            rec["input"] = index
            grad_records.append(rec)
        return {"outputs": outputs, "grads": grad_records}

    def _program(self, op, kwargs, slots, grad_args):
        """``f(*arrays) -> (outputs, grads of sum(outputs))``, one function
        object per op, kwargs, operand slots and grad args (so jit caches)."""
        import json

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

    def record(self, x, placement: dict | None, rule: str | None) -> dict[str, Any]:
        """Report form of one array: shape, dtype, spec, shards, pending, rule, values."""
        values = np.asarray(x)
        rec: dict[str, Any] = {"shape": list(values.shape), "dtype": values.dtype.name}
        if placement is None:  # a host operand's gradient: values only
            rec.update({"spec": None, "shards": None, "pending": [], "rule": None})
        else:
            rec.update(placement)
            rec["rule"] = rule
        rec["values"] = encode(values)
        return rec

    def _run_api(self, case, op, hosts) -> dict[str, Any]:
        import parity

        jax = self.jax
        shape = tuple(case["mesh"]["shape"])
        names = tuple(case["mesh"]["axis_names"])
        devices = [f"cpu:{i}" for i in range(int(np.prod(shape)))]
        pmesh = parity.DeviceMesh(shape, names, devices)
        item, host = case["inputs"][0], hosts[0]
        kwargs = dict(case.get("kwargs", {}))
        if "target" in kwargs:
            kwargs["target"] = parity.TensorLayout(tuple(_entry(e) for e in kwargs["target"]), pmesh)
        if item.get("layout") is None:
            x = host
        else:
            x = self.api.distribute_tensor(host, parity.TensorLayout(
                tuple(_entry(e) for e in item["layout"]), pmesh))
        fn = op.compile("jax", self.ns, list(kwargs))
        out = fn(x, **kwargs)
        jmesh = out.sharding.mesh if hasattr(out.sharding, "mesh") else None
        rec = self.record(out, placement_of(out, jmesh), "typed")
        del jax
        return {"outputs": [rec], "grads": []}


def _input_index(slots, arg_index: int) -> int:
    return [i for i, s in enumerate(slots) if s == ("arg", arg_index)][0]


def _entry(e):
    return tuple(e) if isinstance(e, list) else e


def _spec(layout) -> tuple[tuple[str, ...], ...]:
    return tuple(() if e is None else (e,) if isinstance(e, str) else tuple(e) for e in layout)


def placement_from_type(info, mesh) -> dict[str, Any]:
    """Placement of a traced output: its typed spec on the concrete mesh."""
    from jax.sharding import NamedSharding, PartitionSpec

    spec = info.sharding.spec
    shape = tuple(info.shape)
    entries = tuple(spec) + (None,) * (len(shape) - len(tuple(spec)))
    norm = [[] if e is None else [e] if isinstance(e, str) else list(e) for e in entries]
    sharding = NamedSharding(mesh, PartitionSpec(*entries))
    return {"spec": norm, "shards": _shards(sharding, shape, mesh), "pending": []}


def placement_from_sharding(sharding, shape, mesh) -> dict[str, Any]:
    """Placement of a compiled output: spec when it is a ``NamedSharding``."""
    shape = tuple(shape)
    spec = getattr(sharding, "spec", None)
    norm = None
    if spec is not None:
        entries = tuple(spec) + (None,) * (len(shape) - len(tuple(spec)))
        norm = [[] if e is None else [e] if isinstance(e, str) else list(e) for e in entries]
    return {"spec": norm, "shards": _shards(sharding, shape, mesh), "pending": []}


def _shards(sharding, shape, mesh) -> dict[str, list]:
    index_of = {d.id: i for i, d in enumerate(np.asarray(mesh.devices).flat)}
    shards = {}
    for device, idx in sharding.devices_indices_map(shape).items():
        shards[str(index_of[device.id])] = [
            list(sl.indices(shape[dim])[:2]) for dim, sl in enumerate(idx)]
    return dict(sorted(shards.items(), key=lambda kv: int(kv[0])))


def placement_of(x, mesh=None) -> dict[str, Any]:
    """``spec``, ``shards`` and ``pending`` of a JAX array, as JAX lays it out."""
    sharding = x.sharding
    jmesh = getattr(sharding, "mesh", None)
    if jmesh is None or not hasattr(jmesh, "devices"):
        jmesh = mesh
    shape = tuple(x.shape)
    spec = getattr(sharding, "spec", None)
    if spec is not None:
        norm = []
        for entry in tuple(spec) + (None,) * (len(shape) - len(tuple(spec))):
            norm.append([] if entry is None else [entry] if isinstance(entry, str) else list(entry))
    else:
        norm = None
    index_of = {d.id: i for i, d in enumerate(np.asarray(jmesh.devices).flat)}
    shards = {}
    for device, idx in sharding.devices_indices_map(shape).items():
        bounds = []
        for dim, sl in enumerate(idx):
            start, stop, _ = sl.indices(shape[dim])
            bounds.append([start, stop])
        shards[str(index_of[device.id])] = bounds
    shards = dict(sorted(shards.items(), key=lambda kv: int(kv[0])))
    return {"spec": norm, "shards": shards, "pending": []}


class _FallbackApi:
    """SPEC's API functions on plain ``jax.sharding`` while ``parity.jax_ref``
    is missing (explicit axis types; collectives as ``jax.shard_map``)."""

    def __init__(self, runner: JaxRunner) -> None:
        self.r = runner

    def _mesh(self, layout):
        m = layout.require_mesh()
        return self.r.mesh(m.shape, m.axis_names, True)

    def distribute_tensor(self, x, layout):
        layout.check_shape(np.shape(x))
        return self.r.put(x, layout.spec, self._mesh(layout))

    def distribute_data_input(self, x, layout, batch_dim_name=None):
        return self.distribute_tensor(x, layout)

    def all_gather_variable(self, x):
        from jax.sharding import NamedSharding, PartitionSpec

        return self.r.jax.device_put(x, NamedSharding(x.sharding.mesh, PartitionSpec()))

    def _collective(self, x, axis_name, body, out_spec_fn):
        from jax.sharding import PartitionSpec

        from parity.errors import LayoutError

        jax = self.r.jax
        mesh = x.sharding.mesh
        if axis_name not in mesh.axis_names:
            raise LayoutError(f"axis_name={axis_name!r} is not a mesh axis; the mesh axes are "
                              f"{tuple(mesh.axis_names)}.")
        spec = placement_of(x)["spec"]
        in_spec = [tuple(n) for n in spec]
        out_spec = out_spec_fn(in_spec)

        def ps(s):
            return PartitionSpec(*[None if not n else n[0] if len(n) == 1 else tuple(n) for n in s])

        f = jax.shard_map(body, mesh=mesh, in_specs=ps(in_spec), out_specs=ps(out_spec))
        with jax.set_mesh(mesh):
            return jax.jit(f)(x)

    def all_reduce(self, x, op="sum", axis_name=None):
        lax = self.r.jax.lax
        fns = {"sum": lax.psum, "mean": lax.pmean, "max": lax.pmax, "min": lax.pmin}
        return self._collective(x, axis_name, lambda b: fns[op](b, axis_name),
                                lambda s: [tuple(n for n in d if n != axis_name) for d in s])

    def all_gather(self, x, axis, axis_name):
        lax = self.r.jax.lax
        return self._collective(x, axis_name,
                                lambda b: lax.all_gather(b, axis_name, axis=axis, tiled=True),
                                lambda s: [tuple(n for n in d if n != axis_name) for d in s])

    def reduce_scatter(self, x, axis, axis_name, op="sum"):
        lax = self.r.jax.lax
        if op != "sum":
            # psum_scatter only sums; max/min scatter as reduce then slice.
            fns = {"mean": lax.pmean, "max": lax.pmax, "min": lax.pmin}

            def body(b):
                full = fns[op](b, axis_name)
                size = lax.axis_size(axis_name)
                chunk = full.shape[axis] // size
                return lax.dynamic_slice_in_dim(full, lax.axis_index(axis_name) * chunk, chunk, axis)
        else:
            def body(b):
                return lax.psum_scatter(b, axis_name, scatter_dimension=axis, tiled=True)

        def out_spec(s):
            s = [tuple(n for n in d if n != axis_name) for d in s]
            s[axis] = s[axis] + (axis_name,)
            return s

        return self._collective(x, axis_name, body, out_spec)


__all__ = ["JaxRunner", "setup", "host_values", "placement_of", "categorize"]
