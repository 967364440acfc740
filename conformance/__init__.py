"""The conformance suite: the same cases on JAX (reference) and torch, one
semantics report per backend, and a comparison with one verdict per case.

Modules, one idea each, by role. Imports go one way (no circle; a function
imports only an optional framework: tests/test_conformance_structure.py).

**Catalogue and cases**

| module        | what                                                            |
|---------------|-----------------------------------------------------------------|
| ``catalogue/``| every op once, by family (``entry``: ``Op``, ``Arg``, tolerances) |
| ``signatures``| each op's case-file signature and the JSON Schema, from the catalogue |
| ``cases``     | the ``Case`` type, case files (parse, validate), default cases   |
| ``shape_check``| do a case's shapes fit its op (JAX ``eval_shape``)              |
| ``values``    | input values drawn from the case id; exact value encoding        |

**Runner** (``parity run``)

| module        | what                                                            |
|---------------|-----------------------------------------------------------------|
| ``runner``    | a watchdog over a worker process, progress; returns ``RunSummary`` |
| ``worker_process``| the line protocol with a worker process                     |
| ``worker``    | the worker loop: one case in, one result line out                |
| ``records``   | the runners' shared base, ``run()`` wrapper and array records    |
| ``errors``    | the error category of an exception (its type decides)           |
| ``run_jax``   | executes a case on JAX (never imports torch)                     |
| ``run_torch`` | executes a case on torch, parity or raw DTensor (never imports jax) |
| ``run_compiled``| executes a case on parity inside ``torch.compile`` (``--compile``) |
| ``multiprocess``| ``parity run`` under ``torchrun``: one rank per process        |
| ``opinfo*``   | ``--source opinfo``: PyTorch's OpInfo samples (torch only)       |

**Reports**

| module        | what                                                            |
|---------------|-----------------------------------------------------------------|
| ``entries``   | a report's records, typed (``CaseEntry``, ``ArrayRecord``...)    |
| ``report``    | report header, incremental writer, loader                        |
| ``compiled``  | the compiled column's header, compile errors, beside-eager counts |
| ``compare``   | verdicts, comparison JSON and Markdown                           |
| ``diff``      | semantics diffs between two comparisons (fixed, regressed...)   |
| ``html``      | the self-contained HTML report                                   |
| ``summary``   | a comparison's files and the verdict table on the terminal      |

**Command line**

| module        | what                                                            |
|---------------|-----------------------------------------------------------------|
| ``arguments`` | the selection (``Selection``), its cases, writable ``--out``: ``UsageError`` |
| ``suite``     | ``parity conformance``: three runs (four with ``--compile``), compare, exit status |
| ``cli``       | argument parsing and the commands of ``parity``; exit codes      |
| ``cli_docs``  | generates docs/cli.md from the argument parser                   |
| ``case_docs`` | generates docs/case-format.md, the schema file, docs/reports.md's compiled section |

``import conformance`` imports neither torch nor jax.
"""
