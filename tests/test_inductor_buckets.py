"""``jax_semantics()`` turns inductor's all-reduce bucketing on for its
thread (``collectives/compiled_buckets.inductor_buckets``), so that
``torch.compile(step)`` -- inductor, no backend named -- buckets a step's
all-reduces as XLA's combiner does. The launch counts it gives on gloo
ranks are pinned in ``tests/test_collective_counts.py`` (``compiled
default``); these tests pin the scope: on inside, restored outside, per
thread, and a value the user set is left alone."""

from __future__ import annotations

import threading

import torch._inductor.config as inductor_config

from parity import torch_impl as T


def test_on_inside_the_scope_and_restored_unset_after_the_outermost_exit():
    assert inductor_config.bucket_all_reduces_fx == "none"
    with T.jax_semantics():
        assert inductor_config.bucket_all_reduces_fx == "all"
        with T.jax_semantics(defer=True):
            assert inductor_config.bucket_all_reduces_fx == "all"
        assert inductor_config.bucket_all_reduces_fx == "all"  # the outer scope still holds
    assert inductor_config.bucket_all_reduces_fx == "none"
    # restored as unset, not as an explicit "none": the next scope turns it on again
    assert inductor_config._is_default("bucket_all_reduces_fx")
    with T.jax_semantics():
        assert inductor_config.bucket_all_reduces_fx == "all"


def test_other_threads_keep_their_own_setting():
    seen = {}

    def other():
        seen["other"] = inductor_config.bucket_all_reduces_fx

    with T.jax_semantics():
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert seen == {"other": "none"}


def test_a_value_the_user_set_is_left_alone():
    # explicitly off (inductor's closure patcher: its undo leaves the option unset again,
    # where config.patch's exit would leave an explicit "none" for the tests after this one)
    undo = inductor_config._make_closure_patcher(bucket_all_reduces_fx="none")()
    try:
        with T.jax_semantics():
            assert inductor_config.bucket_all_reduces_fx == "none"
        assert inductor_config.bucket_all_reduces_fx == "none"
    finally:
        undo()
    assert inductor_config._is_default("bucket_all_reduces_fx")
