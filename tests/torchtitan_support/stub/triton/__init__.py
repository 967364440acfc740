"""Import-only stand-in for ``triton`` (no kernels): torchtitan 0.3.0 imports
triton at module level even on CPU, for CUDA kernels these tests never run.
``tests/torchtitan_support/titan_loader.py`` puts it on the path only while torchtitan
is imported, then takes it away again. Calling a kernel raises RuntimeError."""

from __future__ import annotations

__version__ = "0.0.0"


class _Kernel:
    """What ``@triton.jit`` gives: a function that refuses to launch."""

    def __init__(self, fn=None):
        self.fn = fn

    def __getitem__(self, grid):
        return self

    def __call__(self, *args, **kwargs):
        raise RuntimeError("triton stub: torchtitan tried to launch a triton kernel on CPU; "
                           "these tests must not reach a triton code path")


def jit(fn=None, **kwargs):
    """``@triton.jit`` and ``@triton.jit(...)``."""
    if fn is None:
        return _Kernel
    return _Kernel(fn)


def autotune(*args, **kwargs):
    return _Kernel


def heuristics(*args, **kwargs):
    return _Kernel


class Config:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


def cdiv(a: int, b: int) -> int:
    return -(-a // b)
