"""Train a tiny random keras-hub model under its own ``get_layout_map`` and
print the result as JSON (issue 12, point 1).

Run with ``KERAS_BACKEND=jax`` or ``KERAS_BACKEND=torch`` (parity installed,
simulated devices):

    python tests/keras_support/hub_driver.py --configs gemma:2x4,llama:1x8

or under ``torchrun`` (``--torchrun``; every process passes its slice of the
batch, ``auto_shard_dataset=False``). Both backends start from the same numpy
weights (``set_weights``) and see the same batches; each config prints one
``HUB_RESULT`` line: per-step losses and times, ``evaluate`` and ``predict``
results, final weights, and each weight's layout spec (as the backend sees
its value) beside the spec the layout map asked for.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

VOCAB, SEQ, BATCH = 64, 8, 8
# Every dim a layout shards divides by 8 (the (1, 8) mesh's model axis).
DECODER = dict(vocabulary_size=VOCAB, num_layers=2, num_query_heads=8, num_key_value_heads=8,
               hidden_dim=16, intermediate_dim=16)
MODELS = {
    # name: (task class, backbone class, backbone kwargs)
    "gemma": ("GemmaCausalLM", "GemmaBackbone", dict(DECODER, head_dim=4)),
    "llama": ("LlamaCausalLM", "LlamaBackbone", DECODER),
    "llama3": ("Llama3CausalLM", "Llama3Backbone", DECODER),
    "qwen": ("QwenCausalLM", "QwenBackbone", DECODER),
    "qwen2": ("Qwen2CausalLM", "Qwen2Backbone", DECODER),
    "qwen_moe": ("QwenMoeCausalLM", "QwenMoeBackbone",
                 dict(DECODER, moe_intermediate_dim=8, shared_expert_intermediate_dim=8,
                      num_experts=8, top_k=2)),
    "qwen3_moe": ("Qwen3MoeCausalLM", "Qwen3MoeBackbone",
                  dict(DECODER, moe_intermediate_dim=8, num_experts=8, top_k=2, head_dim=4)),
    "bert": ("BertTextClassifier", "BertBackbone",
             dict(vocabulary_size=VOCAB, num_layers=2, num_heads=8, hidden_dim=16,
                  intermediate_dim=16, max_sequence_length=SEQ, dropout=0.0)),
}


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--configs", default="gemma:2x4", help="comma-separated MODEL:MESH, MESH like 2x4")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--devices", type=int, default=8)
    p.add_argument("--torchrun", action="store_true")
    p.add_argument("--out", help="write the results to OUT.rank<N>.jsonl instead of stdout")
    return p.parse_args()


def setup_backend(args):
    backend = os.environ.get("KERAS_BACKEND", "jax")
    if backend == "jax" and not args.torchrun:
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={args.devices}"
        )
    import keras  # noqa: F401

    ctx = None
    if backend == "torch":
        from parity import torch_impl

        torch_impl.install_keras()
        if not args.torchrun:
            ctx = torch_impl.simulate(args.devices)
    return backend, ctx


def bert_megatron_map(mesh):
    """A hand-written Megatron map for keras-hub's BERT: attention and the
    first FFN dense column-parallel, the attention output and the second FFN
    dense row-parallel, embeddings split on the hidden dim."""
    import keras

    m = keras.distribution.LayoutMap(mesh)
    m["token_embedding/embeddings"] = (None, "model")
    m[".*_self_attention_layer.*(query|key|value).kernel"] = (None, "model", None)
    m[".*_self_attention_layer.*(query|key|value).bias"] = ("model", None)
    m[".*_self_attention_layer.*attention_output.kernel"] = ("model", None, None)
    m[".*feedforward_intermediate_dense.kernel"] = (None, "model")
    m[".*feedforward_intermediate_dense.bias"] = ("model",)
    m[".*feedforward_output_dense.kernel"] = ("model", None)
    return m


def data(model_name, steps):
    rng = np.random.default_rng(0)
    n = steps * BATCH
    token_ids = rng.integers(1, VOCAB, size=(n, SEQ)).astype("int32")
    padding_mask = np.ones((n, SEQ), "int32")
    padding_mask[::3, -2:] = 0
    if model_name == "bert":
        x = {"token_ids": token_ids, "segment_ids": np.zeros((n, SEQ), "int32"),
             "padding_mask": padding_mask}
        return x, rng.integers(0, 4, size=(n,)).astype("int32"), None
    x = {"token_ids": token_ids, "padding_mask": padding_mask}
    y = rng.integers(0, VOCAB, size=(n, SEQ)).astype("int32")
    return x, y, padding_mask.astype("float32")


def build(model_name):
    import keras
    import keras_hub

    task_name, backbone_name, kwargs = MODELS[model_name]
    backbone = getattr(keras_hub.models, backbone_name)(**kwargs)
    task_cls = getattr(keras_hub.models, task_name)
    if model_name == "bert":
        task = task_cls(backbone, num_classes=4, preprocessor=None, dropout=0.0)
    else:
        task = task_cls(backbone, preprocessor=None)
    task.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=["sparse_categorical_accuracy"],
    )
    return task, backbone


def layout_map(model_name, mesh):
    import keras_hub

    if model_name == "bert":
        return bert_megatron_map(mesh)
    return getattr(keras_hub.models, MODELS[model_name][1]).get_layout_map(mesh)


def spec_of(variable, backend):
    value = variable.value
    if backend == "torch":
        from parity import torch_impl

        return [list(s) for s in torch_impl.describe(value).spec]
    spec = value.sharding.spec
    return [[] if e is None else [e] if isinstance(e, str) else list(e)
            for e in list(spec) + [None] * (len(value.shape) - len(spec))]


def local_shape(variable, backend):
    """The shape of the block this process's device (device 0 when
    simulated) holds."""
    value = variable.value
    if backend == "torch":
        from parity import torch_impl

        from keras.src.distribution import distribution_lib as kdl

        return list(torch_impl.local_block(value, kdl.distribution_lib.process_id()).shape)
    return list(value.addressable_shards[0].data.shape)


def initial_weights(model):
    """The same random starting value for each variable on both backends,
    in ``model.weights`` order (``set_weights``'s). Drawn by key
    (``variable_keys``: the path), not by position: Keras orders a model's
    variables by backend (RWKV-7's ``output_norm`` comes second on JAX and
    after both layers on torch), and same-shaped variables would swap
    values silently."""
    keys = variable_keys(model)
    rng = np.random.default_rng(1)
    variables = dict(zip(keys, model.weights))
    by_key = {k: (rng.normal(size=tuple(variables[k].shape)) * 0.1).astype(variables[k].dtype)
              for k in sorted(keys)}
    return [by_key[k] for k in keys]


def variable_keys(model):
    """A key per variable of ``model.weights``, the same on every backend:
    its path, or where several variables share a path (BLIP-2's Q-Former
    and its OPT language model each own a ``layer_norm``) the path under the
    name of the layer that holds the owning layer (``blip2_q_former/layer_norm/gamma``).
    Not the order: it differs by backend."""
    parents: dict[int, set] = {}
    for parent in model._flatten_layers(include_self=True, recursive=True):
        for child in parent._flatten_layers(include_self=False, recursive=False):
            for v in list(child._trainable_variables) + list(child._non_trainable_variables):
                parents.setdefault(id(v), set()).add(parent.name)
    paths = [v.path for v in model.weights]
    keys = [p if paths.count(p) == 1 else f"{min(parents.get(id(v), {''}))}/{p}"
            for p, v in zip(paths, model.weights)]
    assert len(set(keys)) == len(keys), "variables repeat a path under one layer"
    return keys


def process_rows(n_processes, rank, mesh_shape):
    """This process's rows of a global batch: its shard of the batch axis."""
    batch_axis, model_axis = mesh_shape
    per = BATCH // batch_axis
    shard = rank // model_axis
    return np.arange(shard * per, (shard + 1) * per)


def step_recorder():
    """A Keras callback that records each training step's loss and its wall
    time (``.losses``, ``.times``)."""
    import keras

    class Steps(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.losses, self.times = [], []

        def on_train_batch_begin(self, batch, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.losses.append(float(logs["loss"]))
            self.times.append(time.perf_counter() - self.start)

    return Steps()


def run(args, backend, model_name, mesh_text):
    import keras
    from keras.src.distribution import distribution_lib as kdl

    rank = kdl.distribution_lib.process_id()
    n_processes = kdl.distribution_lib.num_processes()
    mesh_shape = tuple(int(s) for s in mesh_text.split("x"))
    # Fresh layer-name counters: a config's variable paths (qwen_sparse_moe_block_1
    # ...) must not depend on the configs this process ran before it (the JAX
    # driver runs every config, each torch driver half of them).
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    devices = keras.distribution.list_devices()
    mesh = keras.distribution.DeviceMesh(mesh_shape, ("batch", "model"), devices)
    lmap = layout_map(model_name, mesh)
    distribution = keras.distribution.ModelParallel(
        layout_map=lmap, batch_dim_name="batch", auto_shard_dataset=not args.torchrun)
    x, y, sw = data(model_name, args.steps)
    with distribution.scope():
        task, backbone = build(model_name)
        task.set_weights(initial_weights(task))
        bs = BATCH
        if args.torchrun:
            rows = process_rows(n_processes, rank, mesh_shape)
            idx = np.concatenate([s * BATCH + rows for s in range(args.steps)])
            x = {k: v[idx] for k, v in x.items()}
            y = y[idx]
            sw = None if sw is None else sw[idx]
            bs = len(rows)

        steps = step_recorder()
        task.fit(x, y, sample_weight=sw, batch_size=bs, epochs=1, shuffle=False, verbose=0,
                 callbacks=[steps])
        evaluation = task.evaluate(x, y, sample_weight=sw, batch_size=bs, verbose=0,
                                   return_dict=True)
        first = {k: v[:bs] for k, v in x.items()}
        prediction = np.asarray(task.predict(first, batch_size=bs, verbose=0))
        expected = {}
        for v in task.weights:
            layout = lmap[v.path]
            expected[v.path] = [[] if a is None else [a] if isinstance(a, str) else list(a)
                                for a in (layout.axes if layout is not None else (None,) * len(v.shape))]
        return {
            "config": f"{model_name}:{mesh_text}",
            "backend": backend,
            "rank": rank,
            "losses": steps.losses,
            "step_seconds": steps.times,
            "evaluate": {k: float(v) for k, v in evaluation.items()},
            "predict": prediction.tolist(),
            "weights": {v.path: np.asarray(v.numpy()).tolist() for v in task.weights},
            "specs": {v.path: spec_of(v, backend) for v in task.weights},
            "expected_specs": expected,
            "shapes": {v.path: list(v.shape) for v in task.weights},
            "local_shapes": {v.path: local_shape(v, backend) for v in task.weights},
            "mesh": list(mesh_shape),
        }


def main():
    args = parse()
    backend, ctx = setup_backend(args)
    if args.torchrun:
        import keras

        keras.distribution.initialize()

    def run_all():
        for config in args.configs.split(","):
            model_name, mesh_text = config.split(":")
            result = run(args, backend, model_name, mesh_text)
            line = "HUB_RESULT " + json.dumps(result) + "\n"
            if args.out:
                with open(f"{args.out}.rank{result['rank']}.jsonl", "a") as f:
                    f.write(line)
            else:
                sys.stdout.write(line)
                sys.stdout.flush()

    if ctx is None:
        run_all()
    else:
        with ctx:
            run_all()


if __name__ == "__main__":
    from keras_under_test import assert_keras_under_test

    assert_keras_under_test()
    main()
