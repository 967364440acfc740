"""The conformance suite: the same cases on JAX (reference) and torch, one
semantics report per backend, and a comparison with one verdict per case.

Modules, one idea each:

| module        | what                                                            |
|---------------|-----------------------------------------------------------------|
| ``catalogue`` | every op once, with its JAX and torch callable side by side      |
| ``cases``     | the ``Case`` type, case files (parse, validate), default cases   |
| ``signatures``| each op's case-file signature and the JSON Schema, from the catalogue |
| ``shape_check``| do a case's shapes fit its op (JAX ``eval_shape``)              |
| ``case_docs`` | generates docs/case-format.md, the schema file, docs/reports.md's compiled section |
| ``records``   | the runners' shared base, ``run()`` wrapper and array records    |
| ``errors``    | the error category of an exception (its type decides)           |
| ``values``    | input values drawn from the case id; exact value encoding        |
| ``report``    | report header, incremental writer, loader                        |
| ``runner``    | ``parity run``: a watchdog over a worker process, progress bar   |
| ``worker``    | the worker loop: one case in, one result line out                |
| ``run_jax``   | executes a case on JAX (never imports torch)                     |
| ``run_torch`` | executes a case on torch, parity or raw DTensor (never imports jax) |
| ``run_compiled``| executes a case on parity inside ``torch.compile`` (``--compile``) |
| ``compiled``  | the compiled column's header, compile errors, beside-eager counts |
| ``compare``   | verdicts, comparison JSON and Markdown                           |
| ``diff``      | semantics diffs between two comparisons (fixed, regressed...)   |
| ``html``      | the self-contained HTML report                                   |
| ``suite``     | ``parity conformance``: three runs (four with ``--compile``), compare, summary |
| ``cli``       | argument parsing for ``parity``                                  |

``import conformance`` imports neither torch nor jax.
"""
