"""The rule registry is fixed once the rule families are imported: a late
rule would leave the fast path's clean calls and compiled graphs with the
old answer, so registering one raises a typed error naming the op."""

from __future__ import annotations

import pytest
import torch

from parity.torch_impl.semantics import rules
from parity.torch_impl.semantics.rules import registry


def test_a_rule_registered_after_import_is_refused():
    before = rules.covered()
    with pytest.raises(rules.RegistryClosedError) as err:
        registry.rule_for(torch.Tensor.sgn)(lambda call: None)
    assert err.value.target is torch.Tensor.sgn
    assert "rules/__init__.py" in str(err.value)
    assert rules.covered() == before


def test_every_family_registered_before_the_registry_closed():
    assert len(rules.covered()) > 300 and rules.covers(torch.matmul) and rules.covers(torch.add)
