"""Which test directories time real servers or processes and so run alone (`make test`)."""

from __future__ import annotations

SERIAL_DIRS = frozenset({"e2e", "realserver", "bench", "sim"})
