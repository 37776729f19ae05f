"""How many examples the long fuzz properties draw in `make test`.

The byte-level parsers' properties (chunked framing, SSE bulk scanning) were written with
several hundred to 1,500 examples each; in the suite a quarter of that (never under 100)
keeps every shape of input they draw while the whole run stays within its time budget.
``LOADGEN_LONG_FUZZ=1`` runs the full counts, e.g. before changing a parser::

    LOADGEN_LONG_FUZZ=1 .venv/bin/pytest tests/loadgen/test_chunked.py \\
        tests/loadgen/test_sse_bulk.py
"""

from __future__ import annotations

import os

_FLOOR = 100


def examples(full: int) -> int:
    """The example count for a property written for ``full`` examples."""
    if os.environ.get("LOADGEN_LONG_FUZZ") == "1":
        return full
    return max(_FLOOR, full // 4)
