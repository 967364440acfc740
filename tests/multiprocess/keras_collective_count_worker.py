"""Run under torchrun (gloo ranks): count the collectives one Keras
``train_on_batch`` issues on parity's Keras backend (eager), for the Keras
parity driver's models (``tests/keras_support/parity_driver.py``) under
``ModelParallel`` with the driver's layouts, mesh (1, world) ``batch,
model``. Counted from the profiler's process-group events, as
``collective_count_worker`` does; the counted step is the third (the first
two fill the caches).

    python -m torch.distributed.run --standalone --nproc_per_node=2 \\
        tests/multiprocess/keras_collective_count_worker.py mlp transformer

Rank 0 writes ``{model: {kind: count}}`` as JSON to ``PARITY_RESULT_FILE``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

os.environ["KERAS_BACKEND"] = "torch"
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "keras_support"))

import parity_driver  # noqa: E402
from collective_count_worker import collectives_in  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

GLOBAL_BATCH = 16


def count_step(keras, model_name: str, world: int, rank: int) -> dict[str, int]:
    args = SimpleNamespace(model=model_name, dist="mp", jit=False, torchrun=True, steps=1,
                           devices=world)
    keras.utils.set_random_seed(0)
    distribution = parity_driver.make_distribution(args, keras, world)
    x, y = parity_driver.make_data(args, 1, GLOBAL_BATCH)
    rows = parity_driver.process_rows(args, world, world, rank, GLOBAL_BATCH)
    with distribution.scope():
        model = parity_driver.build_model(args, keras)
        model.set_weights(parity_driver.initial_weights(model))
        for _ in range(2):
            model.train_on_batch(x[rows], y[rows])
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            model.train_on_batch(x[rows], y[rows])
    return collectives_in(prof)


def main() -> None:
    from parity import torch_impl as ti

    ti.install_keras()
    import keras
    from rank_result import report

    keras.distribution.initialize()
    world = ti.num_processes()
    results = {m: count_step(keras, m, world, ti.process_id()) for m in sys.argv[1:]}
    report(results, echo=True)


if __name__ == "__main__":
    main()
