"""JAX semantics for DTensor programs: ``jax_semantics()``.

* ``mode``: the scope and the ``TorchFunctionMode`` (per thread, nestable);
* ``operands``: plain tensors, numpy arrays and scalars meeting a DTensor;
* ``rules``: JAX's output-sharding rule per op family (table in its docstring);
* ``pending``: pending reductions, completed or deferred;
* ``specs``: cached spec <-> placements and the differentiable reshard.
"""

from parity.torch_impl.semantics.mode import JaxSemantics, active, jax_semantics

__all__ = ["JaxSemantics", "active", "jax_semantics"]
