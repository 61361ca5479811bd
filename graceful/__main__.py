"""``python -m graceful``: the ``graceful`` command (see graceful.cli)."""

from __future__ import annotations

import sys

from graceful.cli import main

if __name__ == "__main__":
    sys.exit(main())
