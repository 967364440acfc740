"""The conformance suite: the same cases on JAX (reference) and torch, one
semantics report per backend, and a comparison with one verdict per case.

Folders by concept, top to bottom; a module imports only modules of its own
folder or of folders below it (no circle; a function imports only an optional
framework: tests/test_conformance_structure.py checks both).

| where          | what                                                            |
|----------------|-----------------------------------------------------------------|
| ``docs/``      | generates docs/cli.md, docs/case-format.md and the schema        |
| ``cli.py``     | the ``parity`` commands: argument parsing, exit codes (``python -m conformance.cli``) |
| ``commands/``  | ``arguments`` (the selection, ``--out`` checks), ``suite`` (``parity conformance``) |
| ``opinfo/``    | ``--source opinfo``: PyTorch's OpInfo samples (torch only)       |
| ``running/``   | ``parity run``: the runner and its worker, one runner per column, error categories, ``torchrun`` ranks |
| ``reports/``   | report header, writer, loader; the compiled column; verdicts, diffs, HTML, terminal summary |
| ``cases/``     | the ``Case`` type, case files, default cases; signatures and the JSON Schema; shape checks |
| ``catalogue/`` | every op once, by family (``entry``: ``Op``, ``Arg``, tolerances) |
| ``records/``   | a report's typed records (``entries``) and input values (``values``) |

``import conformance`` imports neither torch nor jax.
"""
