"""The conformance suite: the same cases on JAX (reference) and torch, one
semantics report per backend, and a comparison with one verdict per case.

Modules, one idea each:

| module        | what                                                            |
|---------------|-----------------------------------------------------------------|
| ``catalogue`` | every op once, with its JAX and torch callable side by side      |
| ``cases``     | the ``Case`` type, case files (parse, validate), default cases   |
| ``values``    | input values drawn from the case id; exact value encoding        |
| ``report``    | report header, incremental writer, loader                        |
| ``runner``    | ``parity run``: a watchdog over a worker process, progress bar   |
| ``worker``    | the worker loop: one case in, one result line out                |
| ``run_jax``   | executes a case on JAX (never imports torch)                     |
| ``run_torch`` | executes a case on torch, parity or raw DTensor (never imports jax) |
| ``compare``   | verdicts, comparison JSON and Markdown                           |
| ``html``      | the self-contained HTML report                                   |
| ``suite``     | ``parity conformance``: three runs, compare, summary             |
| ``cli``       | argument parsing for ``parity``                                  |

``import conformance`` imports neither torch nor jax.
"""
