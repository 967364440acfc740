"""Train one small model under a Keras distribution and print the result as JSON.

Run with ``KERAS_BACKEND=jax`` or ``KERAS_BACKEND=torch`` (parity installed):

    python tests/keras_support/parity_driver.py --configs mlp:dp,transformer:mp [--jit]

Both backends start from the same numpy weights (``set_weights``), see the
same batches (``shuffle=False``), and print one JSON line: per-step losses,
``evaluate`` / ``predict`` results, the final weights, and each weight's
layout spec where the backend can say.

Under ``torchrun`` (``--torchrun``), every process passes its own slice of
the batch (``auto_shard_dataset=False``), as a multi-process JAX job does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

N_DEVICES = 8


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--configs", default="mlp:dp,mlp:mp,transformer:dp,transformer:mp",
                   help="comma-separated MODEL:DIST, MODEL in mlp|transformer, DIST in dp|mp")
    p.add_argument("--jit", action="store_true")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--torchrun", action="store_true")
    p.add_argument("--devices", type=int, default=N_DEVICES)
    p.add_argument("--fit-only", action="store_true", help="skip evaluate and predict")
    p.add_argument("--out", help="also write the results to OUT.rank<N>.jsonl")
    p.add_argument("--keras-own", action="store_true",
                   help="torch: Keras's own torch distribution, parity not installed (needs --torchrun)")
    return p.parse_args()


def setup_backend(args):
    backend = os.environ.get("KERAS_BACKEND", "jax")
    if backend == "jax" and not args.torchrun:
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={args.devices}"
        )
    import keras  # noqa: F401

    ctx = None
    if backend != "torch":
        from parity import ParityError, torch_impl

        try:
            torch_impl.install_keras()
        except ParityError as err:
            print("INSTALL_ERROR " + json.dumps(str(err)), flush=True)
    if backend == "torch" and args.keras_own:
        if not args.torchrun:
            raise SystemExit("--keras-own needs --torchrun: Keras's own torch backend has no simulated devices")
        return backend, None
    if backend == "torch":
        from parity import torch_impl

        torch_impl.install_keras()
        if not args.torchrun:
            ctx = torch_impl.simulate(args.devices)
    return backend, ctx


def make_data(args, n_batches, batch):
    rng = np.random.default_rng(0)
    if args.model == "mlp":
        x = rng.normal(size=(n_batches * batch, 16)).astype("float32")
        y = rng.normal(size=(n_batches * batch, 8)).astype("float32")
    else:
        x = rng.integers(0, 32, size=(n_batches * batch, 8)).astype("int32")
        y = rng.integers(0, 32, size=(n_batches * batch, 8)).astype("int32")
    return x, y


def build_model(args, keras):
    if args.model == "mlp":
        inputs = keras.Input((16,))
        h = keras.layers.Dense(32, activation="relu", name="dense_1")(inputs)
        h = keras.layers.Dense(32, activation="tanh", name="dense_2")(h)
        outputs = keras.layers.Dense(8, name="dense_out")(h)
        model = keras.Model(inputs, outputs)
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse",
                      metrics=["mae"], jit_compile=args.jit)
        return model
    vocab, dim, heads = 32, 16, 4
    inputs = keras.Input((8,), dtype="int32")
    x = keras.layers.Embedding(vocab, dim, name="embedding")(inputs)
    attn = keras.layers.MultiHeadAttention(heads, dim // heads, name="mha")(x, x)
    x = keras.layers.LayerNormalization(name="ln_1")(x + attn)
    h = keras.layers.Dense(32, activation="relu", name="ffn_dense_1")(x)
    h = keras.layers.Dense(dim, name="ffn_dense_2")(h)
    x = keras.layers.LayerNormalization(name="ln_2")(x + h)
    outputs = keras.layers.Dense(vocab, name="lm_head")(x)
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"], jit_compile=args.jit,
    )
    return model


def make_distribution(args, keras, n_devices):
    dist = keras.distribution
    devices = dist.list_devices()
    assert len(devices) == n_devices, devices
    if args.dist == "dp":
        return dist.DataParallel(devices=devices, auto_shard_dataset=not args.torchrun)
    mesh = dist.DeviceMesh(mesh_shape(n_devices), ("batch", "model"), devices)
    layout_map = dist.LayoutMap(mesh)
    if args.model == "mlp":
        layout_map["dense_1/kernel"] = (None, "model")
        layout_map["dense_1/bias"] = ("model",)
        layout_map["dense_2/kernel"] = ("model", None)
        layout_map[".*dense.*output"] = ("batch", None)
    else:
        # Megatron: column-parallel then row-parallel.
        layout_map["embedding/embeddings"] = (None, "model")
        layout_map["mha/(query|key|value)/kernel"] = (None, "model", None)
        layout_map["mha/(query|key|value)/bias"] = ("model", None)
        layout_map["mha/attention_output/kernel"] = ("model", None, None)
        layout_map["ffn_dense_1/kernel"] = (None, "model")
        layout_map["ffn_dense_1/bias"] = ("model",)
        layout_map["ffn_dense_2/kernel"] = ("model", None)
    return dist.ModelParallel(layout_map=layout_map, batch_dim_name="batch",
                              auto_shard_dataset=not args.torchrun)


def mesh_shape(n_devices):
    """(2, 4) on 8 devices, (2, 2) on 4."""
    model = 4 if n_devices >= 8 else 2
    return (n_devices // model, model)


def process_rows(args, n_devices, n_processes, rank, global_batch):
    """Rows of one global batch that this process passes (one device per
    process): its data shard, shared by the processes of one model group."""
    if args.dist == "dp":
        shards, shard = n_processes, rank
    else:
        batch_axis, model_axis = mesh_shape(n_devices)
        shards, shard = batch_axis, rank // model_axis
    per = global_batch // shards
    return np.arange(shard * per, (shard + 1) * per)


def initial_weights(model):
    rng = np.random.default_rng(1)
    return [(rng.normal(size=w.shape) * 0.2).astype(w.dtype) for w in model.get_weights()]


def spec_of(variable, backend, keras_own=False):
    value = variable.value
    try:
        if keras_own:
            return own_spec(value)
        if backend == "torch":
            from parity import torch_impl

            return [list(s) for s in torch_impl.describe(value).spec]
        import jax

        spec = value.sharding.spec
        out = []
        for entry in list(spec) + [None] * (len(value.shape) - len(spec)):
            if entry is None:
                out.append([])
            elif isinstance(entry, str):
                out.append([entry])
            else:
                out.append(list(entry))
        return out
    except Exception as err:  # noqa: BLE001
        return f"unknown: {type(err).__name__}"


def own_spec(value):
    """The spec of a Keras-own torch variable, read from DTensor placements
    (a plain tensor is fully replicated)."""
    from torch.distributed.tensor import DTensor, Shard

    data = value.data if hasattr(value, "data") else value
    out = [[] for _ in value.shape]
    if isinstance(data, DTensor):
        names = data.device_mesh.mesh_dim_names
        for axis, placement in zip(names, data.placements):
            if isinstance(placement, Shard):
                out[placement.dim].append(axis)
    return out


def run(args, backend):
    import keras
    from keras.src.distribution import distribution_lib as kdl

    n_processes = kdl.distribution_lib.num_processes()
    rank = kdl.distribution_lib.process_id()
    n_devices = len(keras.distribution.list_devices())
    keras.utils.set_random_seed(0)
    distribution = make_distribution(args, keras, n_devices)
    global_batch = 16
    x, y = make_data(args, args.steps, global_batch)
    with distribution.scope():
        model = build_model(args, keras)
        model.set_weights(initial_weights(model))
        if args.torchrun:
            # Each process passes its slice of every global batch.
            rows = process_rows(args, n_devices, n_processes, rank, global_batch)
            idx = np.concatenate([s * global_batch + rows for s in range(args.steps)])
            fx, fy, bs = x[idx], y[idx], len(rows)
        else:
            fx, fy, bs = x, y, global_batch

        class Losses(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.losses = []

            def on_train_batch_end(self, batch, logs=None):
                self.losses.append(float(logs["loss"]))

        cb = Losses()
        model.fit(fx, fy, batch_size=bs, epochs=1, shuffle=False, verbose=0, callbacks=[cb])
        evaluation, prediction = {}, []
        if not args.fit_only:
            evaluation = model.evaluate(fx, fy, batch_size=bs, verbose=0, return_dict=True)
            prediction = model.predict(fx[:bs], batch_size=bs, verbose=0)
        weights = {v.path: np.asarray(v.numpy()).tolist() for v in model.weights}
        specs = {v.path: spec_of(v, backend, args.keras_own) for v in model.weights}
        # keyed without the optimizer's (uniquified) name
        opt_specs = {v.path.split("/")[-1]: spec_of(v, backend, args.keras_own)
                     for v in model.optimizer.variables if len(v.shape)}
    return {
        "config": f"{args.model}:{args.dist}",
        "backend": backend,
        "rank": rank,
        "losses": cb.losses,
        "evaluate": {k: float(v) for k, v in evaluation.items()},
        "predict": np.asarray(prediction).tolist(),
        "weights": weights,
        "specs": specs,
        "optimizer_specs": opt_specs,
    }


def run_all(args, backend):
    if args.torchrun:
        import keras

        keras.distribution.initialize()
    for config in args.configs.split(","):
        args.model, args.dist = config.split(":")
        result = run(args, backend)
        line = "PARITY_RESULT " + json.dumps(result) + "\n"
        if args.out:
            with open(f"{args.out}.rank{result['rank']}.jsonl", "a") as f:
                f.write(line)
        else:
            sys.stdout.write(line)
            sys.stdout.flush()


def main():
    args = parse()
    backend, ctx = setup_backend(args)
    if ctx is None:
        run_all(args, backend)
    else:
        with ctx:
            run_all(args, backend)


if __name__ == "__main__":
    from keras_under_test import assert_keras_under_test

    assert_keras_under_test()
    main()
