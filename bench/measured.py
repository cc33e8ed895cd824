"""A benchmark that measured nothing says so and fails (issue 28, item 9): an empty table that
exits 0 reads like a result. `require` ends the benchmark with exit status 1 and one line naming
what is missing."""

from __future__ import annotations

import sys
from typing import Any


def require(measured: Any, what: str, bench: str) -> None:
    """Exit 1 with "BENCH: FAILED: measured nothing: WHAT" unless `measured` is non-empty/true."""
    if not measured:
        print(f"{bench}: FAILED: measured nothing: {what}", file=sys.stderr, flush=True)
        sys.exit(1)
