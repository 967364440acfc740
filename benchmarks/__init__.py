"""parity's benchmarks: ``python -m benchmarks [--quick] [--out FILE]``.

Every figure is a ratio against the raw library measured in the same run
(median of repeated runs, warm-up excluded). A benchmark whose piece is
missing says ``not available: <why>`` instead of a figure. See README.md.
"""
