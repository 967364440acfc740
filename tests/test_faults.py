"""Lost ranks end the job with a parity error that names them.

One real test (marked ``multiprocess``): four plain processes started from
torchrun-style environment variables (no elastic agent to tear them down),
one SIGKILLed mid-run; the three others must exit non-zero within 60 s with
a ``LostRankError`` naming it. The rest checks the watchdog's diagnosis in
one process, on a ``HashStore``.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parity.errors import ParityError
from parity.errors import LostRankError
from parity.torch_impl.runtime import watchdog
from parity.torch_impl.runtime.fault_diagnosis import is_distributed_error
from subprocess_env import child_env

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ranks(script: str, args: list[str], world: int, tmp_path: Path, extra_env=None):
    port = free_port()
    procs, logs = [], []
    for rank in range(world):
        env = child_env(
            RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port), **(extra_env or {}),
        )
        log = open(tmp_path / f"rank{rank}.log", "w+")
        logs.append(log)
        procs.append(subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "multiprocess" / script), *args],
            env=env, stdout=log, stderr=subprocess.STDOUT))
    return procs, logs


def read(log) -> str:
    log.flush()
    log.seek(0)
    return log.read()


@pytest.mark.multiprocess
def test_killed_rank_ends_the_others_within_60s_naming_it(tmp_path):
    procs, logs = start_ranks("fault_worker.py", ["kill", "2"], 4, tmp_path)
    try:
        deadline = time.monotonic() + 240  # start-up on a busy 2-core machine is slow
        killed_at = None
        exited_at: dict[int, float] = {}
        while time.monotonic() < deadline and len(exited_at) < 4:
            if killed_at is None and "going down" in read(logs[2]):
                killed_at = time.monotonic()
            for rank, proc in enumerate(procs):
                if rank not in exited_at and proc.poll() is not None:
                    exited_at[rank] = time.monotonic()
            time.sleep(0.05)
        assert killed_at is not None, read(logs[2])
        for rank in (0, 1, 3):
            out = read(logs[rank])
            assert procs[rank].returncode not in (None, 0), out[-3000:]
            assert rank in exited_at and exited_at[rank] - killed_at < 60, out[-3000:]
            assert re.search(r"LostRankError: lost rank 2 of 4", out), out[-3000:]
        assert procs[2].returncode == -9
        print({r: round(exited_at[r] - killed_at, 2) for r in (0, 1, 3)})
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for log in logs:
            log.close()


# -- the diagnosis, in one process ---------------------------------------


def _watchdogs(pg_timeout_s: float):
    """Four watchdogs of a pretend 4-rank job sharing one in-memory store."""
    import torch.distributed as dist

    store = dist.HashStore()
    dogs = [watchdog.Watchdog(store, r, 4, 0, pg_timeout_s=pg_timeout_s) for r in range(4)]
    for r, dog in enumerate(dogs):
        store.set(dog._key("who", r), f"{socket.gethostname()}|{os.getpid()}")
        store.set(dog._key("exit", r), "")
        dog._beat()
    for dog in dogs:
        dog.register()
    return dogs


@pytest.fixture
def watchdogs():
    """Four watchdogs of a pretend 4-rank job (process-group timeout 30 s)."""
    return _watchdogs(30.0)


def test_no_peer_is_lost_while_all_beat(watchdogs):
    assert watchdogs[0].find_lost() is None


def test_a_peer_that_failed_with_its_own_error_is_the_lost_rank(watchdogs):
    watchdogs[2].mark_exit("error:RuntimeError: boom")
    rank, why = watchdogs[0].find_lost()
    assert rank == 2 and "RuntimeError: boom" in why


def test_a_dead_process_without_a_clean_exit_is_lost(watchdogs):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    watchdogs[0].peers[3].pid = dead.pid
    rank, why = watchdogs[0].find_lost()
    assert rank == 3 and f"pid {dead.pid}" in why


def test_a_clean_exit_is_not_a_loss(watchdogs):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    watchdogs[0].peers[3].pid = dead.pid
    watchdogs[3].mark_exit("ok")
    assert watchdogs[0].find_lost() is None


def test_blame_is_followed_to_the_root_cause(watchdogs):
    watchdogs[1].mark_exit("peer:2|its process ended")
    assert watchdogs[0].find_lost() == (2, "its process ended")


def test_a_stale_heartbeat_is_lost(watchdogs):
    dog = watchdogs[0]
    dog.stale_s = 0.0
    dog._refresh()
    dog.peers[1].beat_seen_at -= 1.0
    rank, why = dog.find_lost()
    assert "no heartbeat" in why


def test_gloo_errors_become_lost_rank_errors(watchdogs):
    watchdogs[2].mark_exit("error:KeyError: 'x'")
    gloo = RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:1")
    assert is_distributed_error(gloo)
    err = watchdogs[0].error_for(gloo)
    assert isinstance(err, LostRankError) and isinstance(err, ParityError)
    assert err.rank == 2 and "lost rank 2 of 4" in str(err)


def test_a_timeout_names_the_rank_whose_collectives_did_not_time_out():
    """Ranks 1 and 2 wait in the collective too (theirs time out); rank 3
    is alive and beating but never times out: it is the stuck one, named
    after half the process-group timeout."""
    dogs = _watchdogs(pg_timeout_s=1.0)
    dogs[1].report_timeout()
    dogs[2].report_timeout()
    started = time.monotonic()
    err = dogs[0].error_for(RuntimeError("[gloo] Timed out waiting 1000ms for recv"))
    waited = time.monotonic() - started
    assert isinstance(err, LostRankError) and err.rank == 3, err
    assert "lost rank 3 of 4: stuck outside any collective" in str(err)
    assert 0.5 <= waited < 5, waited


def test_a_timeout_where_every_peer_timed_out_says_the_ranks_disagree():
    dogs = _watchdogs(pg_timeout_s=60.0)
    for r in (1, 2, 3):
        dogs[r].report_timeout()
    started = time.monotonic()
    err = dogs[0].error_for(RuntimeError("[gloo] Timed out waiting 60000ms for recv"))
    assert isinstance(err, LostRankError) and err.rank is None, err
    assert "the ranks disagree on which collective to run" in str(err)
    assert time.monotonic() - started < 10  # not the 30 s a stuck peer is given


def test_a_timeout_with_the_store_gone_names_nobody_stuck():
    """The store dies: reporting the timeout must not raise out of the
    diagnosis (it runs in the exception hook), and no peer is called stuck
    for lack of news from it."""
    dogs = _watchdogs(pg_timeout_s=1.0)

    class DeadStore:
        def __getattr__(self, name):
            def fail(*args, **kwargs):
                raise RuntimeError("Connection reset by peer")
            return fail

    dogs[0].store = DeadStore()  # rank 0 hosts it: no peer to blame for it
    err = dogs[0].error_for(RuntimeError("[gloo] Timed out waiting 1000ms for recv"))
    assert isinstance(err, LostRankError) and err.rank is None, err
    assert "the job's store no longer answers" in str(err), err
    dogs[1].store = DeadStore()  # seen from another rank: the store's host is lost
    err = dogs[1].error_for(RuntimeError("[gloo] Timed out waiting 1000ms for recv"))
    assert isinstance(err, LostRankError) and err.rank == 0, err
    assert "it hosted the job's store, which no longer answers" in str(err), err


def test_a_bug_beside_the_store_is_not_taken_for_a_dead_store():
    """Only what a c10d store raises when it is gone (a RuntimeError such as
    DistNetworkError, an OSError) is read as a dead store; any other error
    in the watchdog's store calls is a bug and propagates."""
    dogs = _watchdogs(pg_timeout_s=1.0)

    class BuggyStore:
        def __getattr__(self, name):
            def fail(*args, **kwargs):
                raise TypeError("set() takes 3 positional arguments but 4 were given")
            return fail

    dogs[0].store = BuggyStore()
    with pytest.raises(TypeError, match="positional arguments"):
        dogs[0].report_timeout()
    with pytest.raises(TypeError, match="positional arguments"):
        dogs[0].mark_exit("ok")


def test_the_heartbeat_never_reads_another_threads_stack(watchdogs, monkeypatch):
    """Reading the main thread's stack from the heartbeat thread crashed
    ranks twice: walking ``sys._current_frames()`` frames under
    torch.compile, then ``faulthandler.dump_traceback(all_threads=True)``
    while gloo's threads made Python thread states (SIGSEGV in
    ``dump_traceback``; the multiprocess test below). Neither may run."""
    import faulthandler
    import threading

    def refuse(*args, **kwargs):
        raise AssertionError("the heartbeat read another thread's stack")

    monkeypatch.setattr(sys, "_current_frames", refuse)
    monkeypatch.setattr(faulthandler, "dump_traceback", refuse)
    errors = []

    def beat():
        try:
            watchdogs[0]._beat()
            watchdogs[0].find_lost()
        except BaseException as e:  # noqa: BLE001 - carried to the main thread
            errors.append(e)

    thread = threading.Thread(target=beat)
    thread.start()
    thread.join()
    assert errors == []


@pytest.mark.multiprocess
def test_collectives_that_make_thread_states_survive_a_1ms_heartbeat():
    """gloo's worker threads create Python thread states while collectives
    run under ``saved_tensors_hooks`` (activation checkpointing); a 1 ms
    heartbeat beside them. Before the heartbeat stopped dumping every
    thread's stack, a rank died of SIGSEGV in every one of 5 runs."""
    from torchrun import run_torchrun

    out = run_torchrun("thread_state_worker.py", nproc=2, timeout=240, args=("500",),
                       env={"PARITY_HEARTBEAT_INTERVAL_S": "0.001"})
    assert out.count("4000 collectives") == 2, out[-3000:]


def test_other_errors_are_not_distributed_errors():
    assert not is_distributed_error(ValueError("bad layout"))
    assert not is_distributed_error(RuntimeError("shape mismatch"))


_EXIT_PROBE = """
import atexit, sys
import torch.distributed as dist
# Registered before initialize(): atexit runs it after parity's own handler.
atexit.register(lambda: print("initialized at exit:", dist.is_initialized(), flush=True))
from parity import torch_impl as ti
ti.initialize()
if sys.argv[1] == "raise":
    raise RuntimeError("the user's own error")
"""


@pytest.mark.multiprocess
@pytest.mark.parametrize("how,destroyed", [("return", True), ("raise", False)])
def test_the_process_group_initialize_started_is_destroyed_at_a_normal_exit(how, destroyed):
    env = child_env(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                    MASTER_PORT=str(free_port()))
    proc = subprocess.run([sys.executable, "-c", _EXIT_PROBE, how], env=env,
                          capture_output=True, text=True, timeout=120)
    assert f"initialized at exit: {not destroyed}" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == (0 if how == "return" else 1), proc.stderr[-2000:]


# -- the pure diagnosis, without a store ------------------------------------


def _peers(**changes):
    from parity.torch_impl.runtime.fault_diagnosis import Peer

    peers = {r: Peer(host="h", pid=100 + r, beat_seen_at=50.0) for r in range(3)}
    for rank, fields in changes.items():
        for name, value in fields.items():
            setattr(peers[int(rank[1:])], name, value)
    return peers


def _find(peers, **kw):
    from parity.torch_impl.runtime.fault_diagnosis import find_lost

    args = dict(this_host="h", pid_alive=lambda pid: True, store_ok=True, store_host_rank=0,
                now=51.0, stale_s=15.0)
    args.update(kw)
    return find_lost(peers, 0, **args)


def test_diagnosis_finds_nobody_while_all_beat():
    assert _find(_peers()) is None


def test_diagnosis_blames_a_dead_pid_on_this_host():
    rank, why = _find(_peers(), pid_alive=lambda pid: pid != 102)
    assert rank == 2 and "pid 102 on h" in why


def test_diagnosis_blames_a_stale_heartbeat():
    rank, why = _find(_peers(r1={"beat_seen_at": 30.0}))
    assert rank == 1 and "no heartbeat for 15 s" in why


def test_diagnosis_blames_the_store_host_when_the_store_is_gone():
    from parity.torch_impl.runtime.fault_diagnosis import find_lost

    peers = _peers()
    rank, why = find_lost(peers, 1, this_host="h", pid_alive=lambda pid: True, store_ok=False,
                          store_host_rank=0, now=51.0, stale_s=15.0)
    assert rank == 0 and "hosted the job's store" in why


def test_diagnosis_follows_a_peer_marker_to_its_root_cause():
    assert _find(_peers(r1={"exit": "peer:2|it failed"})) == (2, "it failed")
