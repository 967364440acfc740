"""Issue 27's measured checks, printed as one ``LAYOUT_CHECK`` JSON line.

A tiny Llama CausalLM (``hub_families.FAMILIES["llama"]``) trained 2 steps
twice (two ``fit`` calls) under ``ModelParallel`` on a (2, 4)
``("batch", "model")`` mesh of 8 simulated devices, with the map
``layout_map_for`` derives plus a key for a renamed layer
(``mlp_up``, which matches nothing). Prints the losses, the
``UnmatchedLayoutKeyWarning`` messages, and on torch each rank's bytes of
local storage beside ``report``'s bytes per device.

    KERAS_BACKEND=torch python tests/keras_support/layout_torch_checks.py
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import numpy as np

DEAD_KEY = r"transformer_layer_\d+/mlp_up/kernel"


def main():
    backend = os.environ.get("KERAS_BACKEND", "jax")
    if backend == "jax":
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + " --xla_force_host_platform_device_count=8")
    import keras
    import keras_hub

    from hub_families import FAMILIES
    from parity import keras_layout

    ctx = None
    if backend == "torch":
        from parity import torch_impl

        torch_impl.install_keras()
        ctx = torch_impl.simulate(8)
        ctx.__enter__()
    task_name, backbone_name, kwargs = FAMILIES["llama"]
    backbone_cls = getattr(keras_hub.models, backbone_name)
    mesh = keras.distribution.DeviceMesh((2, 4), ("batch", "model"),
                                         keras.distribution.list_devices())
    layout_map = keras_layout.layout_map_for(keras_layout.abstract_model(backbone_cls, **kwargs),
                                             mesh)
    layout_map[DEAD_KEY] = (None, "model")
    distribution = keras.distribution.ModelParallel(layout_map=layout_map,
                                                    batch_dim_name="batch")
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = {"token_ids": rng.integers(1, 64, size=(16, 8)).astype("int32"),
         "padding_mask": np.ones((16, 8), "int32")}
    y = rng.integers(0, 64, size=(16, 8)).astype("int32")
    with distribution.scope():
        task = getattr(keras_hub.models, task_name)(backbone_cls(**kwargs), preprocessor=None)
        task.compile(optimizer=keras.optimizers.Adam(1e-2),
                     loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        w = np.random.default_rng(1)
        task.set_weights([(w.normal(size=v.shape) * 0.1).astype(v.dtype)
                          for v in task.get_weights()])
        losses = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):
                history = task.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
                losses.extend(float(v) for v in history.history["loss"])
    found = [str(c.message) for c in caught
             if issubclass(c.category, keras_layout.UnmatchedLayoutKeyWarning)]
    rep = keras_layout.report(task, layout_map)
    result = {"backend": backend, "losses": losses, "warnings": found,
              "report_device_bytes": rep.device_bytes}
    if backend == "torch":
        from parity import torch_impl

        rank_bytes = [0] * 8
        mismatches = []
        for v, row in zip(task.weights, rep.variables):
            value = v.value
            value = getattr(value, "data", value)
            blocks = [torch_impl.local_block(value, d) for d in range(8)]
            sizes = [b.numel() * b.element_size() for b in blocks]
            rank_bytes = [a + b for a, b in zip(rank_bytes, sizes)]
            if set(sizes) != {row.device_bytes}:
                mismatches.append([v.path, sizes, row.device_bytes])
        result["rank_bytes"] = rank_bytes
        result["per_variable_mismatches"] = mismatches
        ctx.__exit__(None, None, None)
    sys.stdout.write("LAYOUT_CHECK " + json.dumps(result) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
