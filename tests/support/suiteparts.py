"""Which test directories time real servers and so run alone (`make test`).

Only a directory whose every test times a real server belongs here; a file elsewhere that
times something says so itself with ``pytestmark = pytest.mark.serial`` (e2e, sim and bench
hold both kinds: a functional end-to-end test shares the cores, a timing one does not).
"""

from __future__ import annotations

SERIAL_DIRS = frozenset({"realserver"})
