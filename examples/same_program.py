"""One program, two backends: equal placements and values.

    python examples/same_program.py
"""

import numpy as np

import parity
from parity import jax_ref, torch_impl

jax_ref.simulate(8)  # JAX sees 8 CPU devices (before JAX starts)


def program(backend):
    mesh = parity.DeviceMesh((2, 4), ("data", "model"))
    layout = parity.TensorLayout((("model", "data"), None), mesh)  # dim 0 over both, model major
    x = backend.distribute_tensor(np.arange(32, dtype=np.float32).reshape(16, 2), layout)
    y = backend.all_reduce(x, "sum", axis_name="data")
    return backend.describe(x), backend.describe(y), backend.to_numpy(y)


with parity.use_backend("jax"):
    jax_result = program(jax_ref)
with torch_impl.simulate(8):
    torch_result = program(torch_impl)

assert jax_result[0] == torch_result[0] and jax_result[1] == torch_result[1]
np.testing.assert_array_equal(jax_result[2], torch_result[2])
print("device 1 holds rows", torch_result[0].shards[1][0], "on both backends")
print("all_reduce over 'data':", torch_result[1].spec, torch_result[2].shape)
