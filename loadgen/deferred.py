"""Bookkeeping that can wait: run between socket reads, a slice per event-loop iteration.

When a stream ends, building its record (its summary, the row, the live statistics) costs
tens to hundreds of µs. Done inline, streams that end together (200 streams started within
one inter-token interval end within one too) queue that work back to back, and every read
arriving meanwhile is stamped late by all of it: measured, when that work still included
classifying the stream's events, the last token's stamp of a 200-stream run lagged the
server's write by up to 25 ms. Deferred here, each loop iteration runs at most about
``budget_ns`` of it and then polls the sockets again, so a stamp waits for one slice at
most. The work is the same; only its place in the loop changes.

While a schedule is behind (``hold``: the open loop is sending requests late), even that
slice waits: at 5,000 requests a second the records are a fifth of the loop's work, and a
host that slows by a third for a tenth of a second then puts the schedule tens of
milliseconds behind; without them the loop keeps up through it. The calls wait, at most
``MAX_HELD`` of them (beyond, they run as usual), until the schedule has caught up.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

_BUDGET_NS = 100_000
"""Work per loop iteration: one call at least, more while under this."""
MAX_HELD = 4096
"""Calls a ``hold`` keeps waiting, at most (a second of records at 4,096 requests a second;
held records are in memory only, like those waiting for their slice)."""


class DeferredCalls:
    """A queue of calls the event loop runs a slice at a time, between its polls.

    ``submit`` from the loop's thread; ``flush`` runs everything still queued at once (when
    the run ends, before whatever the calls feed is closed). A call that raises does not
    stop the others; the first error is re-raised by ``flush``.
    """

    __slots__ = ("_budget_ns", "_error", "_held", "_max_held", "_pending", "_scheduled")

    def __init__(self, budget_ns: int = _BUDGET_NS, max_held: int = MAX_HELD) -> None:
        self._budget_ns = budget_ns
        self._max_held = max_held
        self._pending: deque[Callable[[], None]] = deque()
        self._scheduled = False
        self._held = False
        self._error: Exception | None = None

    def __len__(self) -> int:
        return len(self._pending)

    def hold(self, held: bool) -> None:
        """Keep queued calls waiting (True: the schedule is behind), up to ``max_held`` of
        them, or let them run again, a slice per iteration (False)."""
        self._held = held
        if not held and self._pending and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._slice)

    def submit(self, call: Callable[[], None]) -> None:
        """Queue ``call`` to run soon, after the loop has polled its sockets at least once
        (later while held)."""
        self._pending.append(call)
        if not self._scheduled and not self._waiting():
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._slice)

    def flush(self) -> None:
        """Run every queued call now, in order; raise the first error any call raised."""
        while self._pending:
            self._call(self._pending.popleft())
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _slice(self) -> None:
        pending = self._pending
        if self._waiting():
            self._scheduled = False  # ``hold(False)`` or the next call past the bound
            return
        clock = time.perf_counter_ns
        stop = clock() + self._budget_ns
        while pending:
            self._call(pending.popleft())
            if clock() >= stop or self._waiting():
                break
        if pending:
            # The loop polls its sockets (and runs their reads) before this runs again.
            asyncio.get_running_loop().call_soon(self._slice)
        else:
            self._scheduled = False

    def _waiting(self) -> bool:
        """Whether the queued calls wait now: held, and within the bound."""
        return self._held and len(self._pending) <= self._max_held

    def _call(self, call: Callable[[], None]) -> None:
        try:
            call()
        except Exception as exc:  # kept for flush: one failing record must not stop the rest
            if self._error is None:
                self._error = exc
