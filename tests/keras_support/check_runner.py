"""The Keras check scripts' runner: run one check and print its
``CHECK <name> ok`` / ``CHECK <name> FAIL <json traceback>`` line, which
``tests/check_lines.py`` reads back (also from several torchrun ranks
writing to one stdout)."""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable


def run_check(fn: Callable[[], object]) -> str:
    """Run ``fn``; print and return its CHECK line (every failure is
    reported, by name, instead of stopping the script)."""
    try:
        fn()
        line = f"CHECK {fn.__name__} ok"
    except BaseException:  # noqa: BLE001 - every failure is reported, by name
        line = f"CHECK {fn.__name__} FAIL {json.dumps(traceback.format_exc())}"
    # One write per line: torchrun ranks share one unbuffered stdout, and
    # print() writes the text and the newline separately (lines interleaved).
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    return line
