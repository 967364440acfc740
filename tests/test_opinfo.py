"""The OpInfo harness (``conformance.opinfo.harness``): each class is detected.

Most tests use small stand-in OpInfos (an op callable and its samples) so
that a wrong comparison can be provoked on purpose; the last ones run
PyTorch's own ``op_db`` entries (importing it takes ~30 s)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import pytest
import torch

import parity
from parity import torch_impl
from conformance.opinfo.check import CLASSES, Distributor, _check_grads, Finding
from conformance.opinfo.harness import FAST, check_ops, op_cases, summarize
from conformance.opinfo.samples import scheme_spec


@dataclasses.dataclass
class Sample:
    input: Any
    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)

    def output_process_fn_grad(self, out):
        return out


@dataclasses.dataclass
class FakeOp:
    """The few OpInfo attributes the harness reads."""

    name: str
    fn: Callable
    make: Callable[[bool], list]
    supports_autograd: bool = True
    variant_test_name: str = ""
    decorators: tuple = ()

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def sample_inputs(self, device, dtype, requires_grad=False):
        return self.make(requires_grad)


def _two(requires_grad):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(8, 4, generator=g).requires_grad_(requires_grad)
    b = torch.randn(8, 4, generator=g).requires_grad_(requires_grad)
    return [Sample(a, (b,))]


def _run(op, modes=("sharded",), columns=("parity",), meshes=("2x4",)):
    with torch_impl.simulate(8):
        return list(op_cases(op, budget=FAST, meshes=meshes, modes=modes, columns=columns))


def _classes(records):
    return {r["class"] for r in records}


def test_correct_op_classifies_correct():
    records = _run(FakeOp("fake_add", torch.add, _two), modes=("sharded", "mixed", "grad"))
    assert records and _classes(records) == {"correct"}


def test_wrong_values_are_detected():
    calls = []

    def add_off_by_one_when_sharded(a, b):
        calls.append(type(a).__name__)
        out = torch.add(a, b)
        return out + 1 if type(a).__name__ == "DTensor" else out

    records = _run(FakeOp("fake_wrong", add_off_by_one_when_sharded, _two))
    assert "DTensor" in calls and _classes(records) == {"wrong-values"}
    assert "max |diff| 1" in records[0]["reason"]


def test_parity_error_and_raw_error_are_told_apart():
    def refuse(a, b):
        if type(a).__name__ == "DTensor":
            raise parity.ShardingError("refused on purpose")
        return a + b

    def crash(a, b):
        if type(a).__name__ == "DTensor":
            raise RuntimeError("boom")
        return a + b

    refused = _run(FakeOp("fake_refuse", refuse, _two))
    crashed = _run(FakeOp("fake_crash", crash, _two))
    assert _classes(refused) == {"parity-error"} and "refused on purpose" in refused[0]["reason"]
    assert _classes(crashed) == {"raw-error"} and "RuntimeError: boom" in crashed[0]["reason"]


def test_reference_failure_is_a_skip_with_reason():
    def bad(a, b):
        raise ValueError("torch itself refuses")

    records = _run(FakeOp("fake_bad", bad, _two))
    assert _classes(records) == {"skip"}
    assert "reference raised ValueError: torch itself refuses" in records[0]["reason"]


def test_leaked_partial_is_detected_in_the_dtensor_column():
    def one(requires_grad):
        return [Sample(torch.randn(8, 4))]

    records = _run(FakeOp("fake_sum", lambda a: a.sum(0), one), columns=("dtensor", "parity"))
    by_column = {r["column"]: r["class"] for r in records if r["layout"] == "first"}
    assert by_column == {"dtensor": "leaked-partial", "parity": "correct"}


def test_grad_with_another_placement_is_detected():
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    with torch_impl.simulate(8):
        dist = Distributor("dtensor", (2, 4), ("data", "model"))
        leaf = distribute_tensor(torch.ones(8, 4), dist.torch_mesh, [Shard(0), Replicate()])
        leaf.requires_grad_(True)
        leaf.grad = distribute_tensor(torch.ones(8, 4), dist.torch_mesh, [Replicate(), Replicate()])
        with pytest.raises(Finding) as found:
            _check_grads([leaf], [0], [torch.ones(8, 4)], (1e-5, 1e-5), dist)
    assert found.value.cls == "wrong-grad-placement"


def test_mixed_mode_leaves_the_other_operands_plain():
    records = _run(FakeOp("fake_add", torch.add, _two), modes=("mixed",))
    assert records and all(r["specs"][1] == "plain" and r["specs"][0] != "plain"
                           for r in records)


def test_schemes_shard_only_divisible_dims():
    assert scheme_spec((5, 8), "first", (2, 4), ("data", "model")) == ((), ("data",))
    assert scheme_spec((8, 8), "split", (2, 4), ("data", "model")) == (("data",), ("model",))
    assert scheme_spec((16, 3), "joint", (2, 2, 2), ("a", "b", "c")) == (("a", "b", "c"), ())
    assert scheme_spec((5, 3), "last", (2, 4), ("data", "model")) is None


def test_summary_counts_every_record_once_per_column():
    records = _run(FakeOp("fake_add", torch.add, _two), modes=("sharded",),
                   columns=("parity", "dtensor"))
    summary = summarize(records)
    assert sum(summary["parity"]["sharded"]["2x4"].values()) == len(records) // 2
    assert set(summary["parity"]["sharded"]["2x4"]) == set(CLASSES)


@pytest.mark.slow
def test_opinfo_db_known_results():
    """Real OpInfos: add is correct everywhere; DTensor leaks mean's Partial
    that parity completes."""
    records = check_ops(["add", "mean"], meshes=("2x4",), modes=("sharded",))
    add = {r["class"] for r in records if r["op"] == "add"}
    mean = {(r["column"], r["class"]) for r in records if r["op"] == "mean"}
    assert add == {"correct"}
    assert ("dtensor", "leaked-partial") in mean and ("parity", "correct") in mean


def test_cli_refuses_the_opinfo_source_on_jax(capsys):
    from conformance.cli import main

    assert main(["run", "--backend", "jax", "--source", "opinfo", "--out", "x.json"]) == 2
    assert "--backend torch" in capsys.readouterr().err


@pytest.mark.slow
def test_runner_times_out_a_hung_case_and_resumes_after_it(monkeypatch, tmp_path):
    from conformance.opinfo.runner import run_opinfo

    monkeypatch.setenv("PARITY_OPINFO_HANG_ON", "add:1")
    out = tmp_path / "opinfo.json"
    report = run_opinfo(["add"], meshes=("2x4",), modes=("sharded",), columns=("parity",),
                        timeout=5, out=out, progress=False)
    by_index = {r["index"]: r for r in report["cases"]}
    assert by_index[1]["class"] == "raw-error" and "Timeout" in by_index[1]["reason"]
    assert by_index[2]["class"] == "correct"  # the restarted worker went on
    assert out.exists() and report["totals"]["parity"]["sharded"]["raw-error"] == 1
    assert not (tmp_path / "opinfo.json.partial.jsonl").exists()  # journal removed


def test_runner_abandons_an_op_after_repeated_timeouts(monkeypatch):
    """Every case of the op hangs: after MAX_LOSSES_PER_OP timeouts the rest
    of the op is recorded as abandoned and the run goes on (no subprocess:
    a stand-in worker that never answers)."""
    from conformance.opinfo import runner as opinfo_runner

    class HangingWorker:
        ops = ["slow_op", "next_op"]

        def __init__(self, log):
            self.sent = []

        def send(self, request):
            self.sent.append(request)

        def read(self, timeout):
            req = self.sent[-1]
            if req["op"] == "next_op":
                return self.sent.pop() and {"done": "next_op"}
            if not getattr(self, "begun", False):
                self.begun = True
                return {"begin": {"op": "slow_op", "sample": 0, "mesh": "2x4", "layout": "first",
                                  "specs": ["(data,_)"], "mode": "sharded", "column": "parity",
                                  "class": "skip", "reason": "", "seconds": 0.0, "shapes": [],
                                  "call": None, "shape_policy": "rescaled",
                                  "index": req["start"]}}
            return None  # the case never finishes

        def kill(self):
            pass

    monkeypatch.setattr(opinfo_runner, "_Worker", HangingWorker)
    report = opinfo_runner.run_opinfo(["slow_op", "next_op"], timeout=0.01, progress=False)
    reasons = [r["reason"] for r in report["cases"]]
    assert sum("Timeout" in r for r in reasons) == opinfo_runner.MAX_LOSSES_PER_OP
    assert any("abandoned after 3" in r for r in reasons)
    assert report["header"]["ops"] == report["header"]["ops_finished"] == 2
    assert not report["header"]["interrupted"]


def test_op_level_records_count_once_per_column_mode_and_mesh_in_use():
    base = {"op": "x", "sample": 0, "layout": "first", "specs": [], "reason": "",
            "seconds": 0.0, "shapes": [], "call": None, "shape_policy": None, "index": 0}
    records = [
        {**base, "mesh": "2x4", "mode": "sharded", "column": "parity", "class": "correct"},
        {**base, "mesh": "2x4", "mode": "sharded", "column": "dtensor", "class": "raw-error"},
        {**base, "op": "y", "mesh": None, "mode": None, "column": None, "class": "skip",
         "sample": None},
    ]
    summary = summarize(records)
    assert set(summary) == {"parity", "dtensor"}
    assert summary["parity"]["sharded"] == {"2x4": {**{c: 0 for c in CLASSES},
                                                   "correct": 1, "skip": 1}}
    assert summary["dtensor"]["sharded"]["2x4"]["raw-error"] == 1


@pytest.mark.slow
def test_skip_list_names_exact_ops_and_counts_the_random_ones():
    """Deterministic ops whose names hold a random word (normalize,
    exponential, dropout_backward) run; the random ops are counted against
    the unsharded program under the same seed; only uninitialised memory and
    operand-less factories are skipped."""
    from conformance.opinfo.samples import RANDOM_COUNTED, float32_ops, op_key, skip_reason

    ops = {op_key(o): o for o in float32_ops()}
    for name in ("nn.functional.normalize", "masked.normalize", "nn.functional.poisson_nll_loss",
                 "signal.windows.exponential", "native_dropout_backward"):
        assert skip_reason(ops[name]) is None, name
    for name in RANDOM_COUNTED:  # KeyError: op_db renamed one
        assert skip_reason(ops[name]) is None, name
    assert skip_reason(ops["empty_like"]).startswith("uninitialised")
    assert skip_reason(ops["randn"]).startswith("random factory")
    skipped = sorted(k for k, o in ops.items() if skip_reason(o) is not None)
    assert all(k in ("randn", "randint") or "empty" in k or ops[k].is_factory_function
               for k in skipped), skipped
