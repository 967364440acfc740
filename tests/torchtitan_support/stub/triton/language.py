"""Import-only stand-in for ``triton.language``: any attribute (``tl.constexpr``,
``tl.pointer_type(tl.int64)``...) is an inert placeholder, enough for the
annotations torchtitan evaluates at import; kernels never run (``triton.jit``
gives a launcher that raises)."""

from __future__ import annotations


class _Placeholder:
    def __init__(self, name: str):
        self.name = name

    def __getattr__(self, name: str) -> _Placeholder:
        return _Placeholder(f"{self.name}.{name}")

    def __call__(self, *args, **kwargs) -> _Placeholder:
        # annotations such as ``tl.pointer_type(tl.int64)`` are evaluated at import
        return _Placeholder(f"{self.name}(...)")

    def __repr__(self) -> str:
        return f"<triton stub {self.name}>"


def __getattr__(name: str) -> _Placeholder:
    if name.startswith("__"):
        raise AttributeError(name)
    return _Placeholder(name)
