"""Train a tiny random keras-hub decoder LLM under the layout map
``parity.keras_layout.layout_map_for`` derives, and print the result as
JSON (issue 27's test matrix).

    KERAS_BACKEND=torch python tests/keras_support/hub_matrix_driver.py --configs mistral:2x4

Each family comes from ``hub_families.FAMILIES``; the map is derived from
the abstract model (no weights), then the model is built under
``ModelParallel`` with it. Both backends start from the same numpy weights
and batches (``hub_driver``'s ``data`` and ``initial_weights``). One
``HUB_RESULT`` line per config: losses, step times, final weights, each
weight's spec as the backend sees it and as the map asked, the report's
sharded fraction and largest device's bytes; or ``error`` (one line) when
the family cannot run.
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import sys
import traceback

import numpy as np


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--configs", default="llama:2x4", help="comma-separated FAMILY:MESH")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--devices", type=int, default=8)
    return p.parse_args()


def run(backend, family, mesh_text, steps):
    import keras
    import keras_hub

    from hub_driver import BATCH, initial_weights, spec_of, step_recorder, variable_keys
    from hub_families import FAMILIES, KINDS, TASK_KWARGS, backbone_builder
    from parity import keras_layout

    task_name, backbone_name, kwargs = FAMILIES[family]
    backbone_cls = backbone_builder(backbone_name)
    mesh_shape = tuple(int(s) for s in mesh_text.split("x"))
    # Fresh layer-name counters: a config's variable paths (moe_block_2 ...)
    # must not depend on the configs this process ran before it.
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    mesh = keras.distribution.DeviceMesh(mesh_shape, ("batch", "model"),
                                         keras.distribution.list_devices())
    layout_map = keras_layout.layout_map_for(
        keras_layout.abstract_model(backbone_cls, **kwargs), mesh)
    distribution = keras.distribution.ModelParallel(layout_map=layout_map,
                                                    batch_dim_name="batch")
    kind = KINDS.get(family, "causal_lm")
    with distribution.scope():
        backbone = backbone_cls(**kwargs)
        task_cls = getattr(keras_hub.models, task_name)
        heads = dict(TASK_KWARGS.get(family, {}))
        if kind.endswith("classifier"):
            heads["num_classes"] = CLASSES
        if "dropout" in inspect.signature(task_cls.__init__).parameters:
            heads["dropout"] = 0.0  # a classifier head's own dropout (DistilBERT's: 0.2)
        task = task_cls(backbone=backbone, preprocessor=None, **heads)
        x, y, sw = task_data(kind, task, steps * BATCH)
        task.compile(optimizer=keras.optimizers.Adam(1e-2),
                     loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        task.set_weights(initial_weights(task))
        inputs = task.backbone.input
        if isinstance(inputs, dict) and "position_ids" in inputs:
            # Gemma4 takes positions as an input; its preprocessor gives
            # 0..seq-1 per row.
            x = dict(x, position_ids=np.broadcast_to(
                np.arange(x["token_ids"].shape[1], dtype="int32"), x["token_ids"].shape).copy())

        record = step_recorder()
        task.fit(x, y, sample_weight=sw, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
                 callbacks=[record])
        rep = keras_layout.report(task, layout_map)
        paths = variable_keys(task)  # rep.variables are in task.weights' order
        expected = dict(zip(paths, ([[] if a is None else [a] for a in r.axes]
                                    for r in rep.variables)))
        return {
            "config": f"{family}:{mesh_text}",
            "backend": backend,
            "losses": record.losses,
            "step_seconds": record.times,
            "weights": {p: np.asarray(v.numpy()).tolist() for p, v in zip(paths, task.weights)},
            "specs": {p: spec_of(v, backend) for p, v in zip(paths, task.weights)},
            "expected_specs": expected,
            "sharded_fraction": rep.sharded_fraction,
            "device_bytes": rep.device_bytes,
            "total_bytes": rep.total_bytes,
            "notes": len(rep.notes),
            "mesh": list(mesh_shape),
        }


CLASSES = 4


def task_data(kind, task, n):
    """``n`` rows of inputs, labels and sample weights for a task of this
    kind (the same on both backends): token ids (every text input the
    backbone takes: padding mask, segment ids) and next tokens for a
    ``causal_lm``, a class per row for a ``text_classifier``, images of the
    backbone's shape and a class per row for an ``image_classifier``; a
    ``vision_causal_lm`` gets images of its ``images`` input's shape beside a
    ``causal_lm``'s tokens (a response mask over the second half where it
    takes one), its next tokens below its logits' width."""
    from hub_driver import SEQ, VOCAB

    backbone = task.backbone
    rng = np.random.default_rng(0)
    if kind == "image_classifier":
        images = rng.normal(size=(n, *backbone.image_shape)).astype("float32")
        return images, rng.integers(0, CLASSES, size=(n,)).astype("int32"), None
    names = set(backbone.input) if isinstance(backbone.input, dict) else {"token_ids"}
    x = {"token_ids": rng.integers(1, VOCAB, size=(n, SEQ)).astype("int32")}
    if kind == "vision_causal_lm":
        shape = tuple(backbone.input["images"].shape[1:])
        x["images"] = rng.normal(size=(n, *shape)).astype("float32")
        if "response_mask" in names:
            x["response_mask"] = np.zeros((n, SEQ), "int32")
            x["response_mask"][:, SEQ // 2:] = 1
        padding_mask = np.ones((n, SEQ), "int32")
        padding_mask[::3, -2:] = 0
        x["padding_mask"] = padding_mask
        y = rng.integers(0, task.output.shape[-1], size=(n, SEQ)).astype("int32")
        return x, y, padding_mask.astype("float32")
    padding_mask = np.ones((n, SEQ), "int32")
    padding_mask[::3, -2:] = 0
    if "padding_mask" in names or kind == "causal_lm":
        x["padding_mask"] = padding_mask
    if "segment_ids" in names:
        x["segment_ids"] = np.zeros((n, SEQ), "int32")
    if kind == "text_classifier":
        return x, rng.integers(0, CLASSES, size=(n,)).astype("int32"), None
    y = rng.integers(0, VOCAB, size=(n, SEQ)).astype("int32")
    return x, y, padding_mask.astype("float32")


def one_line(err: BaseException) -> str:
    """The error's type, the innermost layer Keras names, and the innermost
    message: Keras wraps a layer's error in "Exception encountered when
    calling X.call()" once per enclosing layer, then lists the arguments."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", x).strip() for x in str(err).splitlines()]
    lines = [x for x in lines if x]
    calls = re.findall(r"Exception encountered when calling (\S+?)\.?$", "\n".join(lines), re.M)
    content = [x for x in lines if not x.startswith(("Exception encountered", "Arguments received", "•"))
               and not x.endswith("Error encountered:")]
    where = f" in {calls[-1]}" if calls else ""
    message = content[-1] if content else (lines[0] if lines else "")
    return f"{type(err).__name__}{where}: {message}"[:400]


def main():
    args = parse()
    from hub_driver import setup_backend

    args.torchrun = False
    backend, ctx = setup_backend(args)

    def run_all():
        for config in args.configs.split(","):
            family, mesh_text = config.split(":")
            try:
                result = run(backend, family, mesh_text, args.steps)
            except Exception as err:  # noqa: BLE001 - reported per config, as one line
                traceback.print_exc()
                result = {"config": config, "backend": backend, "error": one_line(err)}
            sys.stdout.write("HUB_RESULT " + json.dumps(result) + "\n")
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
