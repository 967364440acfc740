"""Why ``examples/train_llama.py --compile`` checkpoints around each
FSDP2-wrapped block and not inside it: torch's, not parity's (issue 23;
docs/torch-stack.md, "The Llama example compiled").

The program below is plain torch, no parity, one process on a fake process
group of 2 ranks: torch's TP plan (``ColwiseParallel`` / ``RowwiseParallel``)
around ``F.scaled_dot_product_attention`` on the local block, the block's
body in ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``,
the block in ``torch.compile(backend="aot_eager", dynamic=False)``. Dynamo
turns the checkpoint into its checkpoint operator (the checkpointed body
holds no graph break), lifts the TP hooks' ``DeviceMesh`` as a graph input,
and AOTAutograd's compiled forward then fails at run time: ``expected all
tensors_saved_with_vc_check to be Tensors``, the mesh among the values saved
for the backward. Without the checkpoint the same block compiles and equals
eager; in the Llama example, attention written out (matmul, mask, softmax)
instead of SDPA compiled with the checkpoint inside the block (one manual
run). Placed around the FSDP2-wrapped block (the example's placement), the
checkpoint cannot become dynamo's operator (FSDP2's hooks are
``torch.compiler.disable``d), so torch's checkpoint runs the block, and its
recompute, eagerly.

If the first test fails, torch fixed it: move the example's checkpoint into
the block (inside FSDP2's hooks, where torchtitan's wrapper sits) so that the
compiled step traces the blocks too, and update the docs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PROGRAM = """
import json
import torch, torch.distributed as dist, torch.nn as nn, torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.utils.checkpoint import checkpoint

dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))


class Block(nn.Module):
    def __init__(self, checkpointed):
        super().__init__()
        self.checkpointed = checkpointed
        self.w1, self.w2 = nn.Linear(8, 16, bias=False), nn.Linear(16, 8, bias=False)

    def body(self, x):
        h = self.w1(x)[None, None]  # the local block (the plan's use_local_output)
        return self.w2(F.scaled_dot_product_attention(h, h, h, is_causal=True)[0, 0])

    def forward(self, x):
        if self.checkpointed:
            return checkpoint(self.body, x, use_reentrant=False)
        return self.body(x)


def loss_and_grad(block, x):
    block.zero_grad()
    loss = block(x).sum()
    loss.backward()
    return loss.detach(), block.w1.weight.grad.to_local().clone()


out = {}
for checkpointed in (True, False):
    torch.manual_seed(0)
    block = Block(checkpointed)
    parallelize_module(block, mesh, {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    x = torch.randn(4, 8)
    want = loss_and_grad(block, x)  # eager
    compiled = torch.compile(block, backend="aot_eager", dynamic=False)
    try:
        got = loss_and_grad(compiled, x)
    except Exception as err:
        out[str(checkpointed)] = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
    else:
        out[str(checkpointed)] = max((a - b).abs().max().item() for a, b in zip(got, want))
    torch._dynamo.reset()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def outcome() -> dict:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(PROGRAM)],
                          capture_output=True, text=True, cwd=ROOT, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_sdpa_in_a_compiled_checkpoint_under_tp_saves_the_mesh_as_a_tensor(outcome):
    failure = outcome["True"]
    assert isinstance(failure, str), outcome
    assert failure.startswith("AssertionError: expected all tensors_saved_with_vc_check to be "
                              "Tensors"), outcome
    assert "DeviceMesh" in failure, outcome


def test_the_same_block_without_the_checkpoint_compiles_and_equals_eager(outcome):
    assert outcome["False"] == 0.0, outcome
