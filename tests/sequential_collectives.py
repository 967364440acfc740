"""The test suite's guard against DTensor's "N sequential <collective>
operations will be performed" warning (issue 25): DTensor splits a
collective per mesh axis when it finds no flattened mesh of those axes, and
logs it into every user's output; parity's redistributes take one
collective over the flattened group (``collectives.redistribute.merged``).

``collected()`` gathers those warnings logged inside it (the innermost
block only); ``forbidden(where)`` raises when any was. torch warns once per
mesh and axes: each block clears that cache first, so an earlier test
cannot hide a later one's.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

REDISTRIBUTE_LOG = "torch.distributed.tensor._redistribute"
_blocks: list[list[str]] = []


class _Handler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if _blocks and "sequential" in message:
            _blocks[-1].append(message)


_HANDLER = _Handler(logging.WARNING)


@contextlib.contextmanager
def collected() -> Iterator[list[str]]:
    """The sequential-collective warnings DTensor logs inside the block."""
    module = sys.modules.get(REDISTRIBUTE_LOG)
    if module is not None:
        module._warned_flatten_issues.clear()  # torch's warn-once cache
    logger = logging.getLogger(REDISTRIBUTE_LOG)
    if _HANDLER not in logger.handlers:
        logger.addHandler(_HANDLER)
    _blocks.append([])
    try:
        yield _blocks[-1]
    finally:
        _blocks.pop()


@contextlib.contextmanager
def forbidden(where: str) -> Iterator[None]:
    """Raises ``AssertionError`` (naming ``where``, the warning and the fix)
    after a block in which DTensor split a collective per mesh axis."""
    with collected() as messages:
        yield
    if messages:
        raise AssertionError(
            f"DTensor split a collective per mesh axis in {where} ({len(messages)} warning(s)): "
            f"{messages[0]!r}. Fix: redistribute through parity's collectives.redistribute."
            "merged (one collective over the flattened group).")
