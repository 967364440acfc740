"""Which peer of a job is lost, and why: pure functions over what the ranks
published (``parity.torch_impl.runtime.watchdog`` reads it from the job's store).

A peer is *lost* when it exited with an error, or its process is gone
without an ``ok`` marker (same host), or the store it hosted no longer
answers, or its heartbeat is older than ``stale_s`` (other hosts, or a
frozen process); ``peer:R`` markers (a rank that stopped because R was lost)
are followed to the root cause.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

_DIST_MARKERS = (
    "gloo",
    "Connection closed by peer",
    "Connection reset by peer",
    "Timed out waiting",
    "NCCL",
)


@dataclass
class Peer:
    """What one rank last published: where it runs, its heartbeat (and when
    this rank saw it change), whether a collective of its own timed out, and
    its exit marker (``""`` while it runs)."""

    host: str = ""
    pid: int = 0
    beat: str = ""
    beat_seen_at: float = 0.0
    timed_out: bool = False
    exit: str = ""


def why_gone(peer: Peer, *, this_host: str, pid_alive: Callable[[int], bool], store_ok: bool,
             hosts_store: bool, heartbeat_age_s: float, stale_s: float) -> str | None:
    """Why ``peer`` is lost, or None while it looks alive or exited cleanly."""
    if peer.exit.startswith("error:"):
        return f"it failed with {peer.exit[6:]}"
    if peer.exit:  # ok, peer:R (blames R), failed:... (gave up, blames nobody)
        return None
    if peer.host == this_host and peer.pid and not pid_alive(peer.pid):
        return f"its process (pid {peer.pid} on {peer.host}) ended without finishing"
    if not store_ok and hosts_store:
        return f"it hosted the job's store, which no longer answers (pid {peer.pid} on {peer.host})"
    if store_ok and heartbeat_age_s > stale_s:
        return (f"no heartbeat for {stale_s:.0f} s (pid {peer.pid} on {peer.host}: "
                "killed, frozen or cut off)")
    return None


def find_lost(peers: Mapping[int, Peer], rank: int, *, this_host: str,
              pid_alive: Callable[[int], bool], store_ok: bool, store_host_rank: int | None,
              now: float, stale_s: float) -> tuple[int, str] | None:
    """The root-cause lost rank seen from ``rank``, and why; None when none is.

    ``now`` is on the clock of ``Peer.beat_seen_at`` (monotonic).
    """
    for r, peer in peers.items():
        if r == rank:
            continue
        why = why_gone(peer, this_host=this_host, pid_alive=pid_alive, store_ok=store_ok,
                       hosts_store=r == store_host_rank,
                       heartbeat_age_s=now - peer.beat_seen_at, stale_s=stale_s)
        if why:
            return r, why
    for r, peer in peers.items():  # a peer gave up: the job cannot go on
        if r == rank or peer.exit in ("", "ok"):
            continue
        if peer.exit.startswith("peer:"):
            blamed, _, why = peer.exit[5:].partition("|")
            if blamed and int(blamed) != rank:
                return int(blamed), why or f"rank {r} reported it lost"
            return r, f"it gave up waiting for this rank ({rank}) and exited"
        return r, f"it stopped after a failed collective ({peer.exit[7:] or 'see its log'})"
    return None


def stuck_peers(peers: Mapping[int, Peer], rank: int) -> list[int]:
    """Running peers whose collectives have not timed out (asked once this
    rank's collective timed out and the peers had time to time out too:
    the ranks left out are the ones not waiting in any collective)."""
    return [r for r, p in peers.items() if r != rank and not p.exit and not p.timed_out]


def lost_message(lost: tuple[int, str], rank: int, world_size: int) -> str:
    """The text of the ``LostRankError`` for ``lost`` = (rank, why)."""
    r, why = lost
    return (f"lost rank {r} of {world_size}: {why}. This rank ({rank}) stops: "
            "every collective needs all ranks. Look at rank "
            f"{r}'s log for the cause; restart the whole job.")


def is_distributed_error(err: BaseException | None) -> bool:
    """True for torch.distributed / gloo / NCCL failures (anywhere in the chain)."""
    import torch.distributed as dist

    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, dist.DistError):
            return True
        if isinstance(err, RuntimeError) and any(m in str(err) for m in _DIST_MARKERS):
            return True
        err = err.__cause__ or err.__context__
    return False
