"""The generated documentation: ``python -m conformance.docs.cli_md``
writes docs/cli.md from the argument parser; ``python -m
conformance.docs.case_format`` writes docs/case-format.md,
docs/case-file.schema.json and docs/reports.md's compiled section from the
catalogue. Each has ``--check`` (a test runs it)."""
