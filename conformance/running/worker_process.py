"""A worker child process spoken to in JSON lines, watched with time limits.

Both ``parity run`` (``conformance.running.runner``) and the OpInfo runner
(``conformance.opinfo.runner``) feed their cases to such a worker and read
one JSON line back per request: a case that hangs is abandoned by timing
out ``read``, and a worker that dies raises ``WorkerGone``. The worker's
first line is its handshake, ``{"ready": true, ...}``. ``exit_with_parent``
is the worker side: a worker whose runner died ends too.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any


class WorkerGone(RuntimeError):
    """The worker exited, closed its pipe, or did not start."""


class LineWorker:
    """One worker process: ``cmd`` run in its own session with ``env``,
    stderr to ``log``. Raises ``WorkerGone`` when no ready line comes within
    ``ready_timeout`` seconds; the ready line is kept in ``ready``."""

    def __init__(self, cmd: Sequence[str], env: Mapping[str, str], log: Any,
                 ready_timeout: float) -> None:
        self.proc = subprocess.Popen(list(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=log, env=dict(env), start_new_session=True)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.proc.stdout, selectors.EVENT_READ)
        self._buf = b""
        ready = self.read(ready_timeout)
        if ready is None or not ready.get("ready"):
            self.kill()
            raise WorkerGone(f"worker did not start: {ready!r}")
        self.ready: dict[str, Any] = ready

    def read(self, timeout: float) -> dict | None:
        """The next result line; ``None`` on timeout; ``WorkerGone`` on exit."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not self._sel.select(left):
                return None
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                code = self.proc.wait()
                raise WorkerGone(f"worker exited with status {code}"
                                 + (f" (signal {-code})" if code < 0 else ""))
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def send(self, request: dict) -> None:
        """Write one request line; ``WorkerGone`` when the pipe is closed."""
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except OSError as err:  # BrokenPipeError included
            raise WorkerGone(f"worker gone: {err}") from None

    def kill(self) -> None:
        """Kill the worker's whole process group and reap it."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()

    def close(self) -> None:
        """End the worker by closing its input; kill it if it does not exit."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()


def exit_with_parent() -> None:
    """In a worker: end this process when the runner that feeds it dies
    (even by SIGKILL), so a killed run leaves no worker behind, hung or not."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()
