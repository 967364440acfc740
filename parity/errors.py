"""Error classes shared by every backend.

All parity errors are ``ValueError`` subclasses, so code written against
Keras's distribution API (which raises ``ValueError``) keeps working.
"""

from __future__ import annotations


class ParityError(ValueError):
    """Base class of every error parity raises on purpose."""


class LayoutError(ParityError):
    """A layout that cannot apply: unknown or repeated mesh axis, wrong rank,
    an axis or tensor dim out of range."""


class ShardingError(ParityError):
    """A layout that is valid but cannot shard this tensor: a dim that does not
    divide by its shard count, or operands on different meshes."""
