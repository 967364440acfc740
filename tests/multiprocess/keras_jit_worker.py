"""Run under torchrun (gloo ranks): the Keras parity driver's models with
``model.compile(jit_compile=False)`` and then ``jit_compile=True``, on
parity's Keras backend, recording what dynamo compiled.

    python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/multiprocess/keras_jit_worker.py --configs mlp:mp --out OUT

Per config and rank it appends to ``OUT.rank<N>.jsonl`` one
``PARITY_RESULT`` line per run (``"jit": false`` / ``true``): the driver's
losses, evaluate/predict results and weights, plus, for the compiled run,
dynamo's counts (``graphs``, ``graph_breaks`` and their reasons' first
lines) and, for each of Keras's train / test / predict step functions, how
many compiled entries dynamo holds for it (0 would mean the step ran
eagerly).

``torch.compile`` is called with ``backend="aot_eager"`` here (dynamo and
AOTAutograd, where DTensor programs are traced; inductor's code generation
after them does not see DTensors and costs minutes of C++ compiles on the
test machine's two cores); ``PARITY_COMPILE_BACKEND`` overrides it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["KERAS_BACKEND"] = "torch"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "keras_support"))

import parity_driver  # noqa: E402
import torch  # noqa: E402
from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

BACKEND = os.environ.get("PARITY_COMPILE_BACKEND", "aot_eager")


def _with_backend(compile_fn):
    def compile_with_backend(fn=None, **kwargs):
        kwargs.setdefault("backend", BACKEND)
        return compile_fn(fn, **kwargs)

    return compile_with_backend


def step_codes(trainer_module) -> dict[str, object]:
    """The code objects of Keras's ``one_step_on_data`` closures, per step."""
    cls = trainer_module.TorchTrainer
    out = {}
    for step, maker in (("train", cls.make_train_function), ("test", cls.make_test_function),
                        ("predict", cls.make_predict_function)):
        maker = getattr(maker, "__wrapped__", maker)
        (code,) = [c for c in maker.__code__.co_consts
                   if getattr(c, "co_name", None) == "one_step_on_data"]
        out[step] = code
    return out


def _without_output_layouts(make_distribution):
    """The driver's distribution without its ``.*dense.*output`` entry
    (those relayouts run parity's layout conversion inside a layer call,
    where dynamo breaks its graph): the compiled step with one graph per
    step and no relayout breaks."""

    def make(args, keras, n_devices):
        distribution = make_distribution(args, keras, n_devices)
        layout_map = getattr(distribution, "_layout_map", None)
        if layout_map is not None and ".*dense.*output" in layout_map:
            del layout_map[".*dense.*output"]
        return distribution

    return make


def main() -> None:
    torch.compile = _with_backend(torch.compile)
    if "--no-output-layouts" in sys.argv:
        sys.argv.remove("--no-output-layouts")
        parity_driver.make_distribution = _without_output_layouts(parity_driver.make_distribution)
    args = parity_driver.parse()
    args.torchrun = True
    backend, _ = parity_driver.setup_backend(args)
    import keras
    from keras.src.backend.torch import trainer as keras_trainer

    keras.distribution.initialize()
    codes = step_codes(keras_trainer)
    for config in args.configs.split(","):
        args.model, args.dist = config.split(":")
        for jit in (False, True):
            torch._dynamo.reset()
            counters.clear()
            args.jit = jit
            result = parity_driver.run(args, backend)
            result["jit"] = jit
            result["graphs"] = counters["stats"]["unique_graphs"]
            result["graph_breaks"] = sum(counters["graph_break"].values())
            result["break_reasons"] = sorted({r.strip().splitlines()[0] for r in counters["graph_break"]})
            result["compiled_entries"] = {
                step: len(_debug_get_cache_entry_list(code)) for step, code in codes.items()
            }
            with open(f"{args.out}.rank{result['rank']}.jsonl", "a") as f:
                f.write("PARITY_RESULT " + json.dumps(result) + "\n")
    print(f"rank {os.environ.get('RANK')}: ok", flush=True)


if __name__ == "__main__":
    main()
