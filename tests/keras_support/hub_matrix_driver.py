"""Train a tiny random keras-hub model under the layout map
``parity.keras_layout.layout_map_for`` derives, and print the result as
JSON (issue 27's test matrix).

    KERAS_BACKEND=torch python tests/keras_support/hub_matrix_driver.py --configs mistral:2x4
    KERAS_BACKEND=torch python tests/keras_support/hub_matrix_driver.py --plain --configs gemma3n:2x4

Each family comes from ``hub_families.FAMILIES``; the map is derived from
``hub_families.derivation_model`` (the abstract backbone, no weights; for
Gemma4's assistant its task), then the model is built under
``ModelParallel`` with it. Both backends start from the same numpy weights
and batches (``hub_driver``'s ``data`` and ``initial_weights``). One
``HUB_RESULT`` line per config: losses (for Gemma4's MTP assistant, whose
``call`` raises by design: no training, one ``call_with_cache`` step's
``outputs``), step times, final weights, each weight's spec as the backend
sees it and as the map asked, the report's sharded fraction and largest
device's bytes; or ``error`` (one line) when the family cannot run.
``--plain``: the same model and batches on plain Keras (parity not
installed, no distribution), the reference for a family whose Keras
computes differently per backend (``LOSSES_DIFFER``)
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
    p.add_argument("--plain", action="store_true",
                   help="plain Keras on torch: parity not installed, no distribution "
                        "(the mesh in each config is ignored)")
    return p.parse_args()


def run(backend, family, mesh_text, steps, plain=False):
    import contextlib

    import keras
    import keras_hub

    from hub_driver import BATCH, initial_weights, spec_of, step_recorder, variable_keys
    from hub_families import FAMILIES, KINDS, backbone_builder, build_task, derivation_model
    from parity import keras_layout

    task_name, backbone_name, kwargs = FAMILIES[family]
    mesh_shape = tuple(int(s) for s in mesh_text.split("x"))
    # Fresh layer-name counters: a config's variable paths (moe_block_2 ...)
    # must not depend on the configs this process ran before it.
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    scope = contextlib.nullcontext()
    # Built in plain runs too: the layers it names advance Keras's name
    # counters, and the variable paths must be the runs' the plain one is
    # compared with.
    derived_from = derivation_model(family)
    if not plain:
        mesh = keras.distribution.DeviceMesh(mesh_shape, ("batch", "model"),
                                             keras.distribution.list_devices())
        layout_map = keras_layout.layout_map_for(derived_from, mesh)
        scope = keras.distribution.ModelParallel(layout_map=layout_map,
                                                 batch_dim_name="batch").scope()
    kind = KINDS.get(family, "causal_lm")
    with scope:
        backbone = backbone_builder(backbone_name)(**kwargs)
        task_cls = getattr(keras_hub.models, task_name)
        heads = {}
        if kind.endswith("classifier"):
            heads["num_classes"] = CLASSES
        if "dropout" in inspect.signature(task_cls.__init__).parameters:
            heads["dropout"] = 0.0  # a classifier head's own dropout (DistilBERT's: 0.2)
        task = build_task(family, backbone, **heads)
        task.compile(optimizer=keras.optimizers.Adam(1e-2),
                     loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        task.set_weights(initial_weights(task))
        record = step_recorder()
        outputs = {}
        if kind == "mtp_assistant":
            outputs, seconds = draft_step(task)
            record.times.append(seconds)
        else:
            x, y, sw = task_data(kind, task, steps * BATCH)
            inputs = task.backbone.input
            if isinstance(inputs, dict) and "position_ids" in inputs:
                # Gemma4 takes positions as an input; its preprocessor gives
                # 0..seq-1 per row.
                x = dict(x, position_ids=np.broadcast_to(
                    np.arange(x["token_ids"].shape[1], dtype="int32"),
                    x["token_ids"].shape).copy())
            task.fit(x, y, sample_weight=sw, batch_size=BATCH, epochs=1, shuffle=False,
                     verbose=0, callbacks=[record])
        paths = variable_keys(task)  # in task.weights' order
        result = {
            "config": f"{family}:{mesh_text}",
            "backend": backend + (" (plain Keras)" if plain else ""),
            "losses": record.losses,
            "outputs": outputs,
            "step_seconds": record.times,
            "weights": {p: np.asarray(v.numpy()).tolist() for p, v in zip(paths, task.weights)},
            "mesh": list(mesh_shape),
        }
        if plain:
            return result
        rep = keras_layout.report(task, layout_map)  # rep.variables: task.weights' order
        result.update(
            specs={p: spec_of(v, backend) for p, v in zip(paths, task.weights)},
            expected_specs=dict(zip(paths, ([[] if a is None else [a] for a in r.axes]
                                            for r in rep.variables))),
            sharded_fraction=rep.sharded_fraction, device_bytes=rep.device_bytes,
            total_bytes=rep.total_bytes, notes=len(rep.notes))
        return result


def draft_step(task):
    """One ``call_with_cache`` step of Gemma4's MTP draft model (its
    ``call`` raises by design: it only drafts for a target model), on the
    same random target state on both backends: its logits and next hidden
    state, and the seconds it took. The vocabulary ordering its centroid
    head reads is set to a fixed permutation (``initial_weights`` drew
    floats that would all round to token 0)."""
    import time

    import keras

    from hub_driver import BATCH, SEQ

    rng = np.random.default_rng(0)
    vocab = task.backbone.vocabulary_size
    task.token_ordering.assign(rng.permutation(vocab).astype("float32"))
    width = task.backbone_hidden_size
    layer = task.backbone.transformer_layers[0].attention
    cache_shape = (BATCH, len(task.backbone.transformer_layers), 2, SEQ,
                   layer.num_key_value_heads, layer.head_dim)
    start = time.perf_counter()
    logits, hidden = task.call_with_cache(
        rng.normal(size=(BATCH, 1, width)).astype("float32"),
        rng.normal(size=(BATCH, 1, width)).astype("float32"),
        rng.normal(size=cache_shape).astype("float32"), 3,
        padding_mask=np.ones((BATCH, SEQ), "int32"))
    numpy = keras.ops.convert_to_numpy
    outputs = {"logits": numpy(logits).tolist(), "hidden": numpy(hidden).tolist()}
    return outputs, time.perf_counter() - start


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
    if kind == "seq2seq_lm":
        # Encoder and decoder tokens (8 each), the decoder's last 2 padded
        # in every third row; labels: the decoder's next tokens.
        x = {}
        for name in sorted(names):
            if name.endswith("token_ids"):
                x[name] = rng.integers(1, VOCAB, size=(n, SEQ)).astype("int32")
            elif name.endswith("padding_mask"):
                x[name] = np.ones((n, SEQ), "int32")
                x[name][::3, -2:] = 0
        y = rng.integers(0, VOCAB, size=(n, SEQ)).astype("int32")
        return x, y, x["decoder_padding_mask"].astype("float32")
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
    if args.plain:  # no parity: plain Keras on the backend the run names
        import keras

        backend, ctx = keras.backend.backend(), None
    else:
        backend, ctx = setup_backend(args)

    def run_all():
        for config in args.configs.split(","):
            family, mesh_text = config.split(":")
            try:
                result = run(backend, family, mesh_text, args.steps, plain=args.plain)
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
