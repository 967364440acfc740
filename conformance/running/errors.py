"""The SPEC error category of an exception raised while running a case.

| category             | raised for                                                   |
|----------------------|--------------------------------------------------------------|
| ``indivisible``      | a dim that does not divide by its shard count                 |
| ``invalid-layout``   | unknown / repeated mesh axis, rank mismatch, axis out of range |
| ``ambiguous-sharding`` | an op whose output sharding the types cannot fix           |
| ``unsupported``      | the backend has no rule for the op or the operand mix         |
| ``other``            | anything else (including timeouts and crashes)                |

The exception's type decides: every error parity raises is a
``parity.ParityError`` whose class names its ``category``
(``parity/errors.py``). Exceptions parity does not raise come from code
parity does not own: JAX's own checks in the reference column and plain
DTensor in the ``--raw`` column. ``foreign_category`` is the one place that
reads such an exception, by type name where the library gives a type and by
message only where it gives nothing else; each message it knows has a test
(``tests/test_conformance_errors.py``). This module imports neither torch
nor jax.
"""

from __future__ import annotations

import re

from conformance.records.entries import ErrorRecord
from parity.errors import CATEGORIES, ParityError

__all__ = ["CATEGORIES", "categorize", "error_record", "foreign_category"]

# Library exception types that name their failure (matched by class name
# anywhere in the MRO, so neither library is imported here).
FOREIGN_TYPES: dict[str, str] = {
    # jax: explicit axis types refuse an op whose output sharding is ambiguous.
    "ShardingTypeError": "ambiguous-sharding",
}

# Library failures that carry no type of their own: (category, pattern, where).
FOREIGN_MESSAGES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("unsupported",
     re.compile(r"got mixed torch\.Tensor and DTensor"),
     "DTensor: an op given a plain tensor next to a DTensor (RuntimeError)"),
    ("unsupported",
     re.compile(r"in-place operations that require placement changes are not supported"),
     "DTensor: an in-place op whose result needs another placement (RuntimeError)"),
    ("indivisible",
     re.compile(r"Cannot unflatten unevenly sharded tensor"),
     "DTensor: a reshape that splits a sharded dim unevenly (RuntimeError)"),
    # JAX raises a plain ValueError where a typed value's sharding is not the
    # one asked for on Explicit axes; parity raises ShardingTypeError there.
    ("ambiguous-sharding",
     re.compile(r"`with_sharding_constraint` acts as an assert when all axes of mesh are "
                r"of type `Explicit`"),
     ("JAX: with_sharding_constraint on Explicit axes to a sharding other than the "
      "value's type (ValueError)")),
    ("ambiguous-sharding",
     re.compile(r"in_specs passed to shard_map: .* does not match the specs of the input"),
     ("JAX: a shard_map argument whose type on Explicit axes is not its in_specs "
      "(ValueError)")),
)


def foreign_category(err: BaseException) -> str:
    """The category of an exception parity did not raise.

    Checked in order: a known library type (``FOREIGN_TYPES``), then a known
    library message (``FOREIGN_MESSAGES``); anything else is ``other``.
    """
    names = {cls.__name__ for cls in type(err).__mro__}
    for name, category in FOREIGN_TYPES.items():
        if name in names:
            return category
    message = str(err)
    for category, pattern, _where in FOREIGN_MESSAGES:
        if pattern.search(message):
            return category
    return "other"


def categorize(err: BaseException) -> str:
    """The SPEC category of ``err``: its class's ``category`` for a parity
    error, ``foreign_category`` for any other exception."""
    if isinstance(err, ParityError):
        return err.category
    return foreign_category(err)


def error_record(err: BaseException, category: str | None = None) -> ErrorRecord:
    """``{"category", "type", "message"}`` for a report (message cut to 2,000 chars)."""
    message = str(err).strip() or repr(err)
    return {
        "category": category or categorize(err),
        "type": type(err).__name__,
        "message": message[:2000],
    }
