"""``parity run --source opinfo``: PyTorch's OpInfo samples on sharded
DTensors against the unsharded op (torch only). ``samples`` (layout schemes,
shapes), ``check`` (one sample, its finding classes), ``harness`` (the
checks over ops and meshes, the summary), ``runner`` (the whole db in
worker processes; ``python -m conformance.opinfo.runner``)."""
