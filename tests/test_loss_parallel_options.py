"""``F.cross_entropy`` in torch's ``loss_parallel()`` under ``jax_semantics()``,
each option (label smoothing, ``ignore_index``, a class ``weight``, a target
of class probabilities, and together) and each reduction: the loss and the
logits' gradient equal the unsharded computation's (fp32, rel 1e-5), the
logits sharded over the classes on 4 ranks. Simulated ranks here (default
suite, both ``defer`` settings); real gloo ranks in one torchrun job
(``tests/multiprocess/loss_parallel_worker.py``, marked ``multiprocess``).

Plain DTensor (torch 2.13), given a replicated DTensor target and weight:

* no option, ``ignore_index``, ``weight``: the unsharded value and gradient;
* ``label_smoothing`` (its docstring: "currently not supported"): raises
  ``RuntimeError`` (``aten.masked_fill_``: an in-place op on the
  ``Partial(sum)`` of the smoothing term; with a plain target, its mixed
  ``torch.Tensor and DTensor`` error first);
* a target of class probabilities: the unsharded loss, and a wrong logits
  gradient, silently (its ``_log_softmax`` backward passes the gradient
  through, expecting ``nll_loss``'s backward to have done the softmax part).

parity computes the last two by torch's own formula, the ``nll_loss`` term
through DTensor's handlers and the rest from a log-softmax of its own
(``parity/torch_impl/semantics/loss_parallel.py``). Error cases: a
``label_smoothing`` outside [0, 1], a probability target with an
``ignore_index``, or an unknown ``reduction`` raise ``parity.ParityError``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.distributed.tensor.parallel import loss_parallel
from torchrun import run_torchrun

import parity
from parity import torch_impl as ti

sys.path.insert(0, str(Path(__file__).parent / "multiprocess"))

from loss_parallel_worker import (  # noqa: E402
    CASES,
    REDUCTIONS,
    inputs,
    reference,
    run_parity,
    run_plain,
)

L = parity.TensorLayout
# fp32: relative to the largest element of the unsharded value. An element
# near zero is the difference of terms near 1 (softmax minus target), where
# the order of rounding alone moves it by more than 1e-5 of itself.
RTOL = 1e-5
KEYS = [(name, reduction) for name in CASES for reduction in REDUCTIONS]
# What plain DTensor does per case (module docstring): "equal", "raises", "wrong gradient".
PLAIN = {"default": "equal", "ignore_index": "equal", "weight": "equal",
         "label_smoothing": "raises", "smoothing_ignore_weight": "raises",
         "probabilities": "wrong gradient", "probabilities_smoothing_weight": "wrong gradient"}


@pytest.fixture
def mesh4():
    with ti.simulate(4):
        yield parity.DeviceMesh((4,), ("model",))


def assert_unsharded(name: str, reduction: str, loss, grad) -> None:
    want_loss, want_grad = reference(CASES[name], reduction)
    assert_close(loss, want_loss, "loss")
    assert_close(grad, want_grad, "logits grad")


def assert_close(got, want: np.ndarray, what: str = "") -> None:
    np.testing.assert_allclose(np.asarray(got), want, rtol=RTOL,
                               atol=RTOL * float(np.abs(want).max()), err_msg=what)


def close(got, want: np.ndarray) -> bool:
    return np.allclose(np.asarray(got), want, rtol=RTOL, atol=RTOL * float(np.abs(want).max()))


@pytest.mark.parametrize("defer", [False, True], ids=["complete", "defer"])
@pytest.mark.parametrize(("name", "reduction"), KEYS, ids=[f"{n}-{r}" for n, r in KEYS])
def test_simulated_ranks_equal_unsharded(mesh4, name, reduction, defer):
    loss, grad = run_parity(CASES[name], reduction, mesh4, defer=defer)
    assert_unsharded(name, reduction, loss, grad)


@pytest.mark.parametrize("name", list(CASES))
def test_plain_dtensor_outcome_on_simulated_ranks(mesh4, name):
    """What plain DTensor gives, per case (the module docstring's list)."""
    for reduction in REDUCTIONS:
        assert_plain_outcome(name, reduction, run_plain(CASES[name], reduction, mesh4))


def assert_plain_outcome(name: str, reduction: str, outcome: dict) -> None:
    expected = PLAIN[name]
    if expected == "raises":
        assert not outcome["ok"] and "masked_fill_" in outcome["error"], outcome
        return
    assert outcome["ok"], outcome
    want_loss, want_grad = reference(CASES[name], reduction)
    assert_close(outcome["loss"], want_loss, "loss")
    if expected == "equal":
        assert_close(outcome["grad"], want_grad, "logits grad")
    else:
        assert not close(outcome["grad"], want_grad)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_spatial_logits_with_every_option(mesh4, reduction):
    """Logits ``(batch, class, position)`` (``nll_loss2d`` in DTensor's
    handlers), label smoothing, ``ignore_index`` and ``weight`` together."""
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((4, 16, 2)).astype(np.float32)
    target = torch.tensor(rng.integers(0, 16, (4, 2)))
    target[0, 1] = target[2, 0] = 5
    weight = torch.tensor(rng.uniform(0.5, 2.0, (16,)).astype(np.float32))
    options = {"weight": weight, "ignore_index": 5, "label_smoothing": 0.1,
               "reduction": reduction}
    x_ref = torch.tensor(logits, requires_grad=True)
    want = F.cross_entropy(x_ref, target, **options)
    want.sum().backward()
    x = ti.distribute_variable(logits, L((None, "model", None), mesh4))
    with ti.jax_semantics(), loss_parallel():
        loss = F.cross_entropy(x, target, **options)
        loss.sum().backward()
    assert_close(ti.to_numpy(loss), want.detach().numpy(), "loss")
    assert_close(ti.to_numpy(x.grad), x_ref.grad.numpy(), "logits grad")


def test_legacy_size_average_and_aten_call(mesh4):
    """``size_average=False`` (torch's legacy spelling of ``"sum"``) and
    ``torch._C._nn.cross_entropy_loss`` (its enum: 2 is ``"sum"``) with
    label smoothing: the unsharded sum."""
    data = inputs()
    want, _ = reference(CASES["label_smoothing"], "sum")
    target = torch.tensor(data["target"])
    with ti.jax_semantics(), loss_parallel():
        for call in (lambda x: F.cross_entropy(x, target, size_average=False, label_smoothing=0.1),
                     lambda x: torch._C._nn.cross_entropy_loss(x, target, None, 2, -100, 0.1)):
            x = ti.distribute_variable(data["logits"], L((None, "model"), mesh4))
            assert_close(ti.to_numpy(call(x)), want, "loss")


def test_class_dim_stays_sharded(mesh4):
    """parity's route gathers no logits: the gradient keeps the logits'
    placement and the loss (``none``) is replicated."""
    data = inputs()
    x = ti.distribute_variable(data["logits"], L((None, "model"), mesh4))
    with ti.jax_semantics(defer=False), loss_parallel():
        loss = F.cross_entropy(x, torch.tensor(data["target"]), label_smoothing=0.1,
                               reduction="none")
        loss.sum().backward()
    assert ti.describe(loss).spec == ((),)
    assert ti.describe(x.grad).spec == ((), ("model",))


@pytest.mark.parametrize("kwargs", [{"label_smoothing": 1.5},
                                    {"label_smoothing": -0.1, "probabilities": True},
                                    {"ignore_index": 3, "probabilities": True},
                                    {"reduction": "avg", "probabilities": True}],
                         ids=["smoothing-above-1", "smoothing-below-0", "ignore-probabilities",
                              "unknown-reduction"])
def test_invalid_options_raise_parity_error(mesh4, kwargs):
    data = inputs()
    x = ti.distribute_variable(data["logits"], L((None, "model"), mesh4))
    probabilities = kwargs.pop("probabilities", False)
    target = torch.tensor(data["probabilities" if probabilities else "target"])
    with ti.jax_semantics(), loss_parallel(), pytest.raises(parity.ParityError) as err:
        F.cross_entropy(x, target, **kwargs)
    assert str(next(iter(kwargs.values()))) in str(err.value)


def test_integer_target_of_logits_shape_raises_parity_error(mesh4):
    x = ti.distribute_variable(inputs()["logits"], L((None, "model"), mesh4))
    with ti.jax_semantics(), loss_parallel(), pytest.raises(parity.ParityError, match="int64"):
        F.cross_entropy(x, torch.zeros(x.shape, dtype=torch.int64))


@pytest.fixture(scope="module")
def gloo_results(tmp_path_factory):
    result_file = tmp_path_factory.mktemp("loss_parallel") / "results.json"
    run_torchrun("loss_parallel_worker.py", nproc=4, timeout=180,
                 env={"PARITY_RESULT_FILE": str(result_file)})
    return json.loads(result_file.read_text())


@pytest.mark.multiprocess
@pytest.mark.parametrize(("name", "reduction"), KEYS, ids=[f"{n}-{r}" for n, r in KEYS])
def test_gloo_ranks_equal_unsharded(gloo_results, name, reduction):
    outcome = gloo_results[f"{name}/{reduction}"]["parity"]
    assert outcome["ok"], outcome
    assert_unsharded(name, reduction, outcome["loss"], outcome["grad"])


@pytest.mark.multiprocess
def test_plain_dtensor_outcome_on_gloo_ranks(gloo_results):
    """What plain DTensor gives on real ranks: as on simulated ones."""
    for name, reduction in KEYS:
        assert_plain_outcome(name, reduction, gloo_results[f"{name}/{reduction}"]["plain"])
