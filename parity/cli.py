"""The ``parity`` console script: a thin dispatcher into ``conformance.cli``.

    parity run --backend {jax,torch} [--raw] [--cases FILE ...] --out R.json
    parity compare REF.json CAND.json [--json C.json] [--md C.md] [--html C.html]
    parity conformance
    parity ops
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from conformance.cli import main as conformance_main

    return conformance_main(argv)


if __name__ == "__main__":
    sys.exit(main())
