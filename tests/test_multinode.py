"""Real engine paths: two torchrun "nodes" on one machine over loopback,
and ``initialize()`` from Keras's environment variables (marked
``multiprocess``; each launch costs seconds).

torchrun's own variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) are
covered here (torchrun sets them) and, without torchrun, by
tests/test_faults.py, which starts plain processes with only those set.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from subprocess_env import child_env

pytestmark = pytest.mark.multiprocess

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "multiprocess" / "multinode_worker.py"
# Start-up on a busy 2-core machine is slow; a failure ends sooner. Below
# pytest's own 300 s limit, so that a hang still reports what the nodes printed.
TIMEOUT = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra) -> dict:
    env = {k: v for k, v in child_env().items()
           if not k.startswith(("KERAS_DISTRIBUTION_", "TORCHELASTIC_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(extra)  # after the filter: the test's own KERAS_DISTRIBUTION_* stay
    return env


def two_nodes(mode: str) -> str:
    """Two torchrun agents (node_rank 0 and 1), 2 ranks each, c10d rendezvous on loopback.

    Node 0 hosts the rendezvous store (``is_host``): on one machine both agents
    match the endpoint's address and would otherwise both try to host it,
    which can leave one waiting (seen once in a full run: a 300 s hang)."""
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=2",
             f"--node_rank={node}", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}",
             "--rdzv_id=parity-multinode", f"--rdzv_conf=is_host={int(node == 0)}",
             "--max_restarts=0", "--local_addr=127.0.0.1",
             str(WORKER), mode],
            env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for node in (0, 1)
    ]
    outputs, hung = [], False
    try:
        for proc in procs:
            try:
                out, _ = proc.communicate(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                hung = True
                proc.kill()
                out, _ = proc.communicate()
            outputs.append(out)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = "\n".join(outputs)
    assert not hung, f"a node did not finish within {TIMEOUT} s:\n{text[-6000:]}"
    assert all(p.returncode == 0 for p in procs), text[-6000:]
    return text


def test_two_nodes_of_two_ranks_distribute_and_collectives():
    text = two_nodes("api")
    for rank in range(4):
        assert f"rank {rank}: ok" in text
    nodes = {line.split("node ")[1].split()[0] for line in text.splitlines() if ": node " in line}
    assert nodes == {"0", "1"}, text[-3000:]


def test_initialize_from_keras_environment_variables():
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "keras-env"],
            env=clean_env(KERAS_DISTRIBUTION_JOB_ADDRESSES=f"127.0.0.1:{port},127.0.0.1:{port + 1}",
                          KERAS_DISTRIBUTION_NUM_PROCESSES="2",
                          KERAS_DISTRIBUTION_PROCESS_ID=str(pid)),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for pid in (0, 1)
    ]
    outs = []
    try:
        for proc in procs:
            outs.append(proc.communicate(timeout=TIMEOUT)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for pid, (proc, out) in enumerate(zip(procs, outs)):
        assert proc.returncode == 0, out[-4000:]
        assert f"process {pid} of 2: ok" in out


def test_keras_data_parallel_on_two_nodes():
    try:
        from parity import torch_impl
    except Exception as err:  # noqa: BLE001
        pytest.skip(f"parity.torch_impl does not import: {err}")
    if not hasattr(torch_impl, "install_keras"):
        pytest.skip("parity.torch_impl.install_keras (the Keras shim) has not landed")
    import importlib.util

    if importlib.util.find_spec("keras") is None:  # importing it here would pick a backend
        pytest.skip("keras is not installed")
    text = two_nodes("keras-dp")
    for rank in range(4):
        assert f"rank {rank}: keras DataParallel ok" in text
