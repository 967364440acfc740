"""Run under torchrun with 4 gloo ranks: ``shard_map`` with each ``lax``
collective of ``shard_map_cases`` (one block per process), its value, type
and gradient; then with the mapped function under ``torch.compile``
(backends named on the command line), Explicit axes in both. Rank 0 writes the results to ``PARITY_RESULT_FILE``."""

from __future__ import annotations

import sys

import torch

import parity
from parity import P
from parity import torch_impl as ti
from rank_result import report
from shard_map_cases import CASES, COMPILED, IN, X


def run_case(name: str, compiled: str | None) -> dict:
    body, out_spec = CASES[name]
    mesh = parity.make_mesh((2, 2), ("data", "model"))  # Explicit axes, compiled too
    with ti.set_mesh(mesh):
        mapped = ti.shard_map(lambda b: body(ti.lax, b), in_specs=P(*IN), out_specs=P(*out_spec))

        if compiled is not None:  # the mapped function compiled; backward through its graph
            torch._dynamo.reset()
            mapped = torch.compile(mapped, backend=compiled)
        x = ti.device_put(X, P(*IN)).requires_grad_()
        out = mapped(x)
        (out ** 2 * 0.5).sum().backward()
        out = out.detach()  # to_numpy of a value that requires grad fails on gloo ranks
        return {"value": ti.to_numpy(out).tolist(), "type": str(ti.typeof(out)),
                "grad": ti.to_numpy(x.grad).tolist(), "grad_type": str(ti.typeof(x.grad))}


def main() -> None:
    ti.initialize()
    results = {}
    for backend in ["eager", *sys.argv[1:]]:
        names = CASES if backend == "eager" else COMPILED  # compiling costs seconds a case
        results[backend] = {name: run_case(name, None if backend == "eager" else backend)
                            for name in names}
    report(results)


if __name__ == "__main__":
    main()
