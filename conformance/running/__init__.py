"""Running cases (``parity run``): a watchdog over a worker process
(``runner``, ``worker_process``), the worker loop (``worker``), the
runners' shared base (``case_runner``), error categories (``errors``), one
runner per column (``run_jax``, ``run_torch``, ``run_compiled``) and
``torchrun`` ranks (``multiprocess``). ``run_jax`` never imports torch,
``run_torch`` never imports JAX; both load only in the worker."""
