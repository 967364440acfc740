"""The watchdog: turn a dead peer into a ``LostRankError`` that names it.

This module is the plumbing (store protocol, heartbeat thread, exit hooks);
who is lost and why is decided by ``parity.torch_impl.runtime.fault_diagnosis``.

What gloo does on its own (torch 2.13, measured): a rank blocked in a
collective whose peer was killed fails at once with
``RuntimeError: [.../pair.cc:553] Connection closed by peer [127.0.0.1]:PORT``
(a peer's address, never its rank), and the ranks further along the ring fail
in cascade as their neighbours exit; a rank whose peer is alive but stuck
waits for the process-group timeout (``initialize(timeout_s=...)``), then
fails with ``Timed out waiting Nms for recv operation``. torchrun's agent
tears the job down too and names the root-cause rank in its own summary, but
the survivors themselves die of SIGTERM without a word.

The watchdog that ``initialize()`` starts makes every surviving rank say
which rank was lost, as ``jax.distributed``'s coordination service does:

* each rank publishes its host, pid and a heartbeat in the job's store
  (a connection of its own, with a short timeout), and an exit marker when it
  leaves: ``ok`` (normal exit), ``error:...`` (an exception of its own) or
  ``peer:R`` (it stops because rank R was lost);
* a peer is *lost* when it exited with an error, or its process is gone
  without an ``ok`` marker (same host: ``kill(pid, 0)``), or its heartbeat is
  older than ``PARITY_HEARTBEAT_STALE_S`` (default 15 s: other hosts, or a
  frozen process); ``peer:R`` markers are followed to the root cause;
* an uncaught distributed error (gloo's connection reset or timeout) is
  reported as ``parity.ParityError: lost rank R of N ...`` chained to the
  original error (``sys.excepthook``), and the process exits 1;
* a rank that is not inside a collective when a peer is lost (computing, or
  waiting elsewhere) is ended by the watchdog after a short grace period with
  the same message on stderr and exit status 1 (``os._exit``: like JAX, a
  job that lost a rank cannot continue).

A peer that is alive but stuck inside Python keeps its heartbeat; the
others then wait for the process-group timeout. A rank whose collective
timed out says so in the store and gives its peers half the process-group
timeout to say the same (theirs time out too when they wait in a
collective); the message lists the running ranks that did not (the stuck
ones, outside any collective).

The heartbeat thread never looks at another thread's Python stack. It did,
to publish whether the main thread was inside ``torch.distributed``: first
walking ``sys._current_frames()[main].f_back`` (a frame object made for one
of dynamo's frames could point at freed memory by the next step), then
with ``faulthandler.dump_traceback(all_threads=True)``, which reads the
interpreter's thread list without its lock. gloo's worker threads take the
GIL from threads CPython does not know (a collective issued under
``saved_tensors_hooks``, as activation checkpointing does, copies the hooks
there), so CPython links a new thread state into that list while the
thread runs, and the dump read one half made: SIGSEGV in
``dump_traceback`` (measured: every run of
``tests/multiprocess/thread_state_worker.py`` with a 1 ms heartbeat, and a
rank of ``examples/train_llama.py`` in about 1 run of 50 with the default
0.5 s).

``PARITY_WATCHDOG=0`` turns the watchdog off.
"""

from __future__ import annotations

import atexit
import datetime
import os
import socket
import sys
import threading
import time

from parity.errors import LostRankError, ParityError
from parity.torch_impl.runtime.fault_diagnosis import (
    Peer,
    find_lost,
    is_distributed_error,
    lost_message,
    stuck_peers,
)
from parity.torch_impl.runtime.torch_compat import default_store

_PREFIX = "parity/faults/"
# What a c10d store raises when its server is gone or a socket fails
# (DistNetworkError, DistStoreError: RuntimeErrors; OSError from the socket).
# Anything else is a bug here and propagates.
_STORE_ERRORS = (RuntimeError, OSError)


def _env_float(name: str, default: float) -> float:
    """``float(os.environ[name])``, ``default`` when unset; ``ParityError``
    naming the variable when it is not a number."""
    text = os.environ.get(name)
    if not text:
        return default
    try:
        return float(text)
    except ValueError:
        raise ParityError(f"{name}={text!r} is not a number of seconds; unset it or "
                          f"give e.g. {name}={default}.") from None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed child its parent has not reaped yet is a zombie: dead
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True


class Watchdog:
    """Heartbeats and peer checks for one rank (see the module docstring)."""

    def __init__(self, store, rank: int, world_size: int, store_host_rank: int | None,
                 pg_timeout_s: float) -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self.store_host_rank = store_host_rank
        self.pg_timeout_s = pg_timeout_s
        self.interval_s = _env_float("PARITY_HEARTBEAT_INTERVAL_S", 0.5)
        self.stale_s = _env_float("PARITY_HEARTBEAT_STALE_S", 15.0)
        self.grace_s = _env_float("PARITY_WATCHDOG_GRACE_S", 3.0)
        self.peers = {r: Peer() for r in range(world_size)}
        self.lost: tuple[int, str] | None = None
        self._beats = 0
        self._stop = threading.Event()
        self._store_lock = threading.Lock()
        self._reported = threading.Lock()
        self._done = False
        self._thread = threading.Thread(target=self._loop, name="parity-watchdog", daemon=True)

    # -- store protocol -------------------------------------------------
    def _key(self, kind: str, rank: int) -> str:
        return f"{_PREFIX}{kind}/{rank}"

    def register(self) -> None:
        # "who" last: a peer that has seen it finds every key _refresh reads
        # (a missing key would block multi_get until the store's timeout)
        self.store.set(self._key("exit", self.rank), "")
        self.store.set(self._key("timeout", self.rank), "")
        self._beat()
        self.store.set(self._key("who", self.rank), f"{socket.gethostname()}|{os.getpid()}")
        keys = [self._key("who", r) for r in range(self.world_size)]
        self.store.wait(keys, datetime.timedelta(seconds=max(self.pg_timeout_s, 10)))
        for r, value in zip(range(self.world_size), self.store.multi_get(keys)):
            host, _, pid = value.decode().partition("|")
            self.peers[r].host, self.peers[r].pid = host, int(pid)
            self.peers[r].beat_seen_at = time.monotonic()

    def _beat(self) -> None:
        self._beats += 1
        with self._store_lock:
            self.store.set(self._key("hb", self.rank), str(self._beats))

    def report_timeout(self) -> None:
        """Say in the store that a collective of this rank timed out (nothing
        when the store no longer answers: the diagnosis then names its host)."""
        try:
            with self._store_lock:
                self.store.set(self._key("timeout", self.rank), "1")
        except _STORE_ERRORS:  # the store may be the thing that died
            pass

    def _refresh(self) -> bool:
        """Read every peer's heartbeat and exit marker; False when the store is gone."""
        ranks = range(self.world_size)
        keys = ([self._key("hb", r) for r in ranks] + [self._key("exit", r) for r in ranks]
                + [self._key("timeout", r) for r in ranks])
        try:
            with self._store_lock:
                values = self.store.multi_get(keys)
        except _STORE_ERRORS:  # a dead store is one of the faults we report
            return False
        now = time.monotonic()
        for r in ranks:
            peer = self.peers[r]
            beat = values[r].decode()
            if beat != peer.beat:
                peer.beat, peer.beat_seen_at = beat, now
            peer.exit = values[self.world_size + r].decode()
            peer.timed_out = values[2 * self.world_size + r] == b"1"
        return True

    # -- diagnosis (fault_diagnosis decides; this reads the store) ----------
    def find_lost(self) -> tuple[int, str] | None:
        """The root-cause lost rank and why, following ``peer:R`` markers."""
        return self._lost_as_read(self._refresh())

    def _lost_as_read(self, store_ok: bool) -> tuple[int, str] | None:
        """``find_lost`` on what the last ``_refresh`` read (``store_ok``: its result)."""
        return find_lost(self.peers, self.rank, this_host=socket.gethostname(),
                         pid_alive=_pid_alive, store_ok=store_ok,
                         store_host_rank=self.store_host_rank, now=time.monotonic(),
                         stale_s=self.stale_s)

    def wait_for_lost(self, within_s: float) -> tuple[int, str] | None:
        deadline = time.monotonic() + within_s
        while True:
            found = self.lost or self.find_lost()
            if found or time.monotonic() >= deadline:
                return found
            time.sleep(min(self.interval_s, 0.2))

    def message(self, lost: tuple[int, str]) -> str:
        return lost_message(lost, self.rank, self.world_size)

    def stuck_peers(self) -> list[int] | None:
        """After this rank's collective timed out: the running peers whose
        collectives did not time out within half the process-group timeout
        (polled; returns as soon as every running peer's did, or a peer is
        lost); None when the store no longer answers (nobody can tell)."""
        self.report_timeout()
        deadline = time.monotonic() + 0.5 * self.pg_timeout_s
        while True:
            store_ok = self._refresh()
            if self.lost or self._lost_as_read(store_ok):  # the store's host, when a peer
                return []
            if not store_ok:
                return None
            stuck = stuck_peers(self.peers, self.rank)
            if not stuck or time.monotonic() >= deadline:
                return stuck
            time.sleep(min(self.interval_s, 0.2))

    def error_for(self, err: BaseException) -> ParityError:
        """The ParityError that explains a distributed failure seen by this rank."""
        text = str(err).strip()
        first_line = text.splitlines()[0] if text else type(err).__name__
        timed_out = "Timed out" in text or "timed out" in text
        stuck = self.stuck_peers() if timed_out else []
        if stuck is None:
            return LostRankError(
                f"a collective timed out after the process-group timeout "
                f"({self.pg_timeout_s:.0f} s) on rank {self.rank}, and the job's store no "
                f"longer answers, so which rank stopped cannot be told: look at every "
                f"rank's log; restart the whole job. (backend said: {first_line})", rank=None)
        if stuck:
            names = ", ".join(map(str, stuck))
            return LostRankError(
                f"lost rank {names} of {self.world_size}: stuck outside any collective "
                f"(alive, and no collective of its timed out) while this rank "
                f"({self.rank}) waited the process-group timeout ({self.pg_timeout_s:.0f} s). "
                f"Look at rank {names}'s stack (py-spy dump); restart the whole job. "
                f"(backend said: {first_line})", rank=stuck[0])
        # A dead peer on this host shows at once; a vanished one on another
        # host once its heartbeat is stale.
        lost = self.wait_for_lost(2 * self.interval_s if timed_out else self.stale_s + 2 * self.interval_s)
        if lost:
            return LostRankError(self.message(lost) + f" (backend said: {first_line})",
                                 rank=lost[0])
        if timed_out:
            return LostRankError(
                f"a collective timed out after the process-group timeout "
                f"({self.pg_timeout_s:.0f} s) on rank {self.rank}, and every running peer's "
                f"collective timed out too: the ranks disagree on which collective to run "
                f"(backend said: {first_line})", rank=None)
        return ParityError(
            f"a collective failed on rank {self.rank} and no peer was found lost "
            f"(backend said: {first_line})")

    # -- exits ----------------------------------------------------------------
    def mark_exit(self, value: str) -> None:
        if self._done:
            return
        self._done = True
        try:
            with self._store_lock:
                self.store.set(self._key("exit", self.rank), value)
        except _STORE_ERRORS:  # the store may be the thing that died
            pass

    def at_exit(self) -> None:
        self.mark_exit("ok")
        self._stop.set()
        self.join()
        if self.rank == self.store_host_rank:
            # Keep the store up until the others have said goodbye (bounded).
            deadline = time.monotonic() + _env_float("PARITY_STORE_LINGER_S", 10.0)
            while time.monotonic() < deadline:
                if not self._refresh():
                    break
                if all(self.peers[r].exit or not _pid_alive(self.peers[r].pid)
                       for r in range(self.world_size)
                       if r != self.rank and self.peers[r].host == socket.gethostname()) and all(
                    self.peers[r].exit for r in range(self.world_size)
                    if r != self.rank and self.peers[r].host != socket.gethostname()
                ):
                    break
                time.sleep(0.1)

    def _loop(self) -> None:
        detected_at = None
        while not self._stop.wait(self.interval_s):
            try:
                self._beat()
            except _STORE_ERRORS:  # a dead store: find_lost says so below
                pass
            if self.lost is None:
                self.lost = self.find_lost()
                if self.lost is not None:
                    detected_at = time.monotonic()
            elif time.monotonic() - detected_at >= self.grace_s and not self._done:
                self.terminate(self.lost)

    def terminate(self, lost: tuple[int, str]) -> None:
        if not self._reported.acquire(blocking=False):
            return
        self.mark_exit(f"peer:{lost[0]}|{lost[1]}")
        sys.stderr.write(f"parity.errors.LostRankError: {self.message(lost)}\n")
        sys.stderr.flush()
        os._exit(1)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        """Wait for the heartbeat thread to leave (``_stop`` set first).

        A daemon thread still inside a store call when the interpreter
        finalizes gets ``pthread_exit`` from CPython 3.11 as it takes the GIL
        back in pybind11's ``gil_scoped_release`` destructor; the forced
        unwind through that ``noexcept`` destructor calls ``std::terminate``:
        the rank dies of SIGABRT ("terminate called without an active
        exception") after its work is done. Bounded by one store timeout.
        """
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(self.interval_s + _env_float("PARITY_STORE_TIMEOUT_S", 5.0))


_watchdog: Watchdog | None = None


def _excepthook(previous):
    def hook(exc_type, exc, tb):
        wd = _watchdog
        if wd is not None and not wd._done:
            if is_distributed_error(exc) and not isinstance(exc, ParityError):
                wd._reported.acquire(blocking=False)  # the watchdog must not cut us short
                new = wd.error_for(exc)
                new.__cause__ = exc
                lost = getattr(new, "rank", None)
                wd.mark_exit(f"peer:{lost}|" if lost is not None else "failed:")
                previous(type(new), new, new.__traceback__)
                return
            if isinstance(exc, LostRankError) and exc.rank is not None:
                wd.mark_exit(f"peer:{exc.rank}")
            else:
                first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
                wd.mark_exit(f"error:{exc_type.__name__}: {first}")
        previous(exc_type, exc, tb)

    return hook


def start(pg_timeout_s: float) -> Watchdog | None:
    """Start this process's watchdog on the default process group's store.

    Called by ``initialize()``. Does nothing (returns None) when
    ``PARITY_WATCHDOG=0``, for a world of one, or when the store is not a
    ``TCPStore``.
    """
    global _watchdog
    import torch.distributed as dist

    if os.environ.get("PARITY_WATCHDOG", "1") == "0" or _watchdog is not None:
        return _watchdog
    world, rank = dist.get_world_size(), dist.get_rank()
    if world < 2:
        return None
    store = default_store()
    while hasattr(store, "underlying_store"):
        store = store.underlying_store
    if not isinstance(store, dist.TCPStore):
        return None
    client = dist.TCPStore(
        store.host, store.port, is_master=False,
        timeout=datetime.timedelta(seconds=_env_float("PARITY_STORE_TIMEOUT_S", 5.0)),
        wait_for_workers=False,
    )
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    wd = Watchdog(client, rank, world, None if agent_store else 0, pg_timeout_s)
    wd.register()
    _watchdog = wd
    sys.excepthook = _excepthook(sys.excepthook)
    atexit.register(wd.at_exit)
    wd.start()
    return wd
