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


@pytest.fixture
def watchdogs():
    """Four watchdogs of a pretend 4-rank job sharing one in-memory store."""
    import torch.distributed as dist

    store = dist.HashStore()
    dogs = [watchdog.Watchdog(store, r, 4, 0, pg_timeout_s=30.0) for r in range(4)]
    for r, dog in enumerate(dogs):
        store.set(dog._key("who", r), f"{socket.gethostname()}|{os.getpid()}")
        store.set(dog._key("exit", r), "")
        dog._beat()
    for dog in dogs:
        dog.register()
    return dogs


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


def test_a_timeout_names_the_rank_stuck_outside_collectives(watchdogs):
    for r in (0, 1, 2):
        watchdogs[r]._state = (True, time.time())
        watchdogs[r]._beat()
    watchdogs[3]._state = (False, time.time() - 60)
    watchdogs[3]._beat()
    err = watchdogs[0].error_for(RuntimeError("[gloo] Timed out waiting 30000ms for recv"))
    assert err.rank == 3 and "stuck outside any collective" in str(err)


def _in_file(filename: str, body):
    """Run ``body()`` from a function whose code claims ``filename``."""
    scope = {"body": body}
    exec(compile("def call():\n    return body()\n", filename, "exec"), scope)
    return scope["call"]()


def test_the_main_threads_stack_is_read_from_the_heartbeat_thread(watchdogs):
    """The heartbeat's "inside a collective" flag: True while the main
    thread runs code of ``torch/distributed`` (a function compiled under
    such a name, blocked until the heartbeat thread has looked), False
    otherwise. Read with faulthandler's dump (no frame objects made:
    walking ``f_back`` from this thread crashed ranks under torch.compile)."""
    import threading

    dog = watchdogs[0]
    seen: dict[str, bool] = {}

    def look_from_another_thread(key: str) -> None:
        thread = threading.Thread(target=lambda: seen.__setitem__(key, dog._main_in_collective()))
        thread.start()
        thread.join()

    assert threading.current_thread() is threading.main_thread()
    _in_file("/site-packages/torch/distributed/distributed_c10d.py",
             lambda: look_from_another_thread("inside"))
    _in_file("/home/user/train.py", lambda: look_from_another_thread("outside"))
    assert seen == {"inside": True, "outside": False}


def test_the_heartbeat_makes_no_frame_objects_of_the_main_thread(watchdogs, monkeypatch):
    """The crash this prevents (a rank's SIGSEGV under torch.compile, 4 of
    9 stress runs on 4 gloo ranks with a 2 ms heartbeat before, 0 of 8
    after: docs/torch-stack.md) came from frame objects made for the main
    thread's frames from the heartbeat thread. ``sys._current_frames`` is
    the only way Python makes them for another thread."""
    import threading

    def refuse():
        raise AssertionError("the heartbeat made frame objects of another thread")

    monkeypatch.setattr(sys, "_current_frames", refuse)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(watchdogs[0]._main_in_collective()))
    thread.start()
    thread.join()
    assert seen == [False]


def test_thread_files_takes_one_threads_frames_from_a_faulthandler_dump():
    import faulthandler
    import tempfile
    import threading

    with tempfile.TemporaryFile() as dump:
        _in_file("/x/torch/distributed/fake.py", lambda: faulthandler.dump_traceback(dump))
        dump.seek(0)
        text = dump.read().decode()
    files = watchdog.thread_files(text, threading.main_thread().ident)
    # most recent first: the lambda that dumped, then the function it ran in
    assert files[0] == __file__ and files[1] == "/x/torch/distributed/fake.py", text
    assert watchdog.thread_files(text, 12345) == []


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
