"""``python -m parity ...``: the ``parity`` console script without installing it."""

from __future__ import annotations

import sys

from parity.cli import main

sys.exit(main())
