"""``<report>.log``: what a run's worker processes print (warnings, the
traceback of a worker that crashed), kept beside the report only when a
worker said something, so a run leaves no empty log file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TextIO


class WorkerLog:
    """The log of the run writing ``out`` (``<out>.log``); ``out=None``: the
    workers' output goes to ``os.devnull``. ``file`` is what the workers
    write to; ``close()`` removes the log when nothing was written.

    Raises ``OSError`` when the log cannot be created (the caller has
    checked ``out`` is writable)."""

    def __init__(self, out: str | Path | None) -> None:
        self.path: Path | None = Path(str(out) + ".log") if out else None
        self.file: TextIO = open(self.path if self.path is not None else os.devnull, "w")

    def close(self) -> None:
        self.file.close()
        if self.path is not None and self.path.is_file() and self.path.stat().st_size == 0:
            self.path.unlink()
