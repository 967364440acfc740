"""What ``conformance/cli.py``'s commands stand on: the selection and
``--out`` checks (``arguments``: ``Selection``, ``UsageError``) and
``parity conformance`` (``suite``: three runs, four with ``--compile``,
compared, its exit status)."""
