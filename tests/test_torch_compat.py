"""parity's stand-ins for torch 2.13's ``rank_map`` and
``maybe_disable_local_tensor_mode`` (older torch lacks them) behave as torch's."""

from __future__ import annotations

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
