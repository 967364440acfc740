"""Error categories of SPEC for an exception raised by either backend.

| category             | raised for                                                   |
|----------------------|--------------------------------------------------------------|
| ``indivisible``      | a dim that does not divide by its shard count                 |
| ``invalid-layout``   | unknown / repeated mesh axis, rank mismatch, axis out of range |
| ``ambiguous-sharding`` | an op whose output sharding the types cannot fix           |
| ``unsupported``      | the backend has no rule for the op or the operand mix         |
| ``other``            | anything else (including timeouts and crashes)                |

Judged from the exception's class names (parity's own errors first) and its
message, so this module imports neither torch nor jax.
"""

from __future__ import annotations

import re
from typing import Any

CATEGORIES = ("indivisible", "invalid-layout", "ambiguous-sharding", "unsupported", "other")

_INDIVISIBLE = re.compile(
    r"does not (evenly )?divide|not divisible|evenly divide|divisible by", re.I)
_INVALID = re.compile(
    r"not a mesh axis|not in the mesh|not found in mesh|more than once|used twice|"
    r"rank mismatch|has rank|entries but the tensor|out of range|unknown mesh axis|"
    r"is not an axis|Resource axis", re.I)
_AMBIGUOUS = re.compile(r"ambiguous", re.I)
_UNSUPPORTED = re.compile(
    r"got mixed torch\.Tensor and DTensor|not implemented|no sharding strategy|"
    r"does not have a sharding strategy|NotImplemented|not supported|unsupported", re.I)


def categorize(err: BaseException) -> str:
    """The SPEC category of ``err``."""
    names = {cls.__name__ for cls in type(err).__mro__}
    message = str(err)
    if "ShardingError" in names:
        return "indivisible" if _INDIVISIBLE.search(message) else "invalid-layout"
    if "LayoutError" in names:
        return "invalid-layout"
    if "ShardingTypeError" in names or _AMBIGUOUS.search(message):
        return "ambiguous-sharding"
    if _INDIVISIBLE.search(message):
        return "indivisible"
    if _INVALID.search(message):
        return "invalid-layout"
    if "NotImplementedError" in names or _UNSUPPORTED.search(message):
        return "unsupported"
    return "other"


def error_record(err: BaseException, category: str | None = None) -> dict[str, Any]:
    """``{"category", "type", "message"}`` for a report (message cut to 2,000 chars)."""
    message = str(err).strip() or repr(err)
    return {
        "category": category or categorize(err),
        "type": type(err).__name__,
        "message": message[:2000],
    }
