"""parity's stand-ins for torch 2.13's ``rank_map`` and
``maybe_disable_local_tensor_mode`` (older torch lacks them) behave as torch's;
a ``DeviceMesh`` subclass registers as opaque the way this torch registers
``DeviceMesh`` (torch 2.15 renamed the function and the kind)."""

from __future__ import annotations

import logging

import pytest
import torch
from torch.distributed import _local_tensor

from parity.torch_impl.runtime import torch_compat


def test_fallback_rank_map_builds_the_same_local_tensor_as_torch(sim8):
    mine = torch_compat._rank_map(lambda r: torch.full((2,), float(r)))
    theirs = _local_tensor.rank_map(lambda r: torch.full((2,), float(r)))
    assert set(mine._local_tensors) == set(theirs._local_tensors) == set(range(8))
    for r in range(8):
        assert torch.equal(mine._local_tensors[r], theirs._local_tensors[r])


def test_no_simulated_mode_is_found_outside_simulate():
    # No LocalTensorMode: torch's rank_map asks the process group for the rank.
    assert torch_compat._active_mode() is None


def test_fallback_disable_makes_tensors_plain_inside_simulation(sim8):
    with torch_compat._disable_local_tensor_mode():
        plain = torch.ones(3) * 2
    assert getattr(plain, "_local_tensors", None) is None
    assert getattr(torch.ones(3) * 2, "_local_tensors", None) is not None


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_a_mesh_subclass_registers_as_opaque_as_device_mesh_does_without_deprecation():
    opaque = pytest.importorskip("torch._library.opaque_object")
    from torch.distributed.device_mesh import DeviceMesh

    class Marked(DeviceMesh):
        marker = "m"

    records = _Records()
    logger = logging.getLogger(opaque.__name__)  # where torch logs its deprecations
    logger.addHandler(records)
    try:
        torch_compat.register_opaque_like_device_mesh(Marked, ("marker",))
    finally:
        logger.removeHandler(records)
    base, mine = opaque.get_opaque_obj_info(DeviceMesh), opaque.get_opaque_obj_info(Marked)
    if base is None:  # a torch whose DeviceMesh is not opaque: nothing registered
        assert mine is None
        return
    assert mine is not base and mine.opaque_typ == base.opaque_typ
    assert mine.members["marker"] == opaque.MemberType.USE_REAL
    assert set(base.members) <= set(mine.members)
    assert not [m for m in records.messages if "deprecated" in m], records.messages


def test_process_rank_is_the_process_groups_plain_int_inside_simulation(sim8):
    import torch.distributed as dist

    rank = torch_compat.process_rank()
    assert type(rank) is int and rank == dist.distributed_c10d._get_default_group().rank()
    torch_says = dist.get_rank()  # torch 2.15: every simulated rank's, as a SymInt
    if isinstance(torch_says, int):
        assert torch_says == rank
    else:
        assert isinstance(torch_says, torch.SymInt)
