"""Raising a parity error from code that ``torch.compile`` traces.

Dynamo cannot build a parity error inside a traced function: the errors'
``__init__`` calls ``super().__init__``, which dynamo does not trace
("Attempted to call a super() attribute that is not a function or method",
torch 2.13), so a refused op would come out of ``torch.compile`` as a graph
break -- a compile error, not the error the program earned. ``raise_error``
builds and raises the error in a function dynamo runs as Python while it
traces (``assume_constant_result``): the error itself propagates, carried by
dynamo's ``InternalTorchDynamoError`` (its ``__cause__``/``__context__``,
its message starting ``ShardingTypeError: ...``). Eagerly it is a plain
``raise``.
"""

from __future__ import annotations

from typing import Any, NoReturn

import torch

from parity.errors import ParityError


@torch.compiler.assume_constant_result
def _raise(cls: type, message: str, data: tuple) -> NoReturn:
    raise cls(message, **dict(data))


def raise_error(cls: type[ParityError], message: str, **data: Any) -> NoReturn:
    """Raise ``cls(message, **data)``, also from traced code. ``data``'s
    values must be Python constants there (strings, numbers, tuples of
    them), as an error's fields are."""
    _raise(cls, message, tuple(data.items()))
    raise AssertionError("unreachable: _raise raises")  # for type checkers
