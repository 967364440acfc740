"""Shared fixtures: simulated torch ranks and the meshes the issues name."""

from __future__ import annotations

import importlib.util
import logging
import os

import pytest
import sequential_collectives

# The JAX reference runs on simulated CPU devices. On a GPU machine JAX would
# also start its CUDA backend and take most of the GPU's memory, which the
# torch side of the same test process needs.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# Tests that drive Keras on both backends need the keras, jax and torch extras.
needs_keras_extra = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("keras", "jax", "torch")),
    reason="needs the keras extra",
)

MESHES = {
    "8": ((8,), ("x",)),
    "2x4": ((2, 4), ("data", "model")),
    "4x2": ((4, 2), ("data", "model")),
    "2x2x2": ((2, 2, 2), ("a", "b", "c")),
}


def cpu_devices(n: int) -> list[str]:
    return [f"cpu:{i}" for i in range(n)]


@pytest.fixture
def sim8():
    """Eight simulated torch ranks for the duration of one test."""
    from parity import torch_impl

    with torch_impl.simulate(8):
        yield torch_impl



@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """Fails the test during which DTensor warned that it split a collective
    per mesh axis ("N sequential all_reduce operations", issue 25)."""
    with sequential_collectives.forbidden(item.nodeid):
        return (yield)
