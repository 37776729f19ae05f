"""The timeouts of one exchange on the fast transport (``loadgen.http.pool``).

A read timeout (a wait for bytes, the response head included, that lasts ``timeout_s``
fails with ``httpx.ReadTimeout``) and, optionally, an absolute deadline for the whole
request (a wait still going on at ``deadline_ns`` fails with ``TimeoutError``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx

_MIN_REARM_S = 0.001
"""The loop's timers may fire up to a millisecond early (uvloop counts whole ms)."""


class ReadDeadline:
    """The read timeout and the overall deadline of one exchange, on one timer.

    One timer serves every wait (the head, then one wait per read, or one for a whole
    drained body): arming and cancelling a timer each time, or an ``asyncio.timeout`` per
    wait and another for the request, costs more than the rest of the wait. A wait only
    notes its waiter and its start (``since_ns``, which a drained body's reads move on
    with their arrival stamps); the timer, when it fires early for the current wait,
    moves to that wait's deadline, so a wait still fails exactly ``timeout_s`` after it
    started, or at ``deadline_ns``.
    """

    __slots__ = (
        "_deadline_ns",
        "_expired",
        "_handle",
        "_loop",
        "_now_ns",
        "_timeout_ns",
        "_waiter",
        "since_ns",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        now_ns: Callable[[], int],
        timeout_s: float | None,
        *,
        deadline_ns: int | None = None,
        expired: Callable[[], TimeoutError] | None = None,
    ) -> None:
        """``deadline_ns`` is on ``now_ns``'s clock; ``expired`` makes the error a wait
        gets at the deadline."""
        self._loop = loop
        self._now_ns = now_ns
        self._timeout_ns = int(timeout_s * 1e9) if timeout_s is not None else None
        self._deadline_ns = deadline_ns
        self._expired = expired
        self._handle: asyncio.TimerHandle | None = None
        self.since_ns = 0
        """When the current wait for bytes started (or last got some)."""
        self._waiter: asyncio.Future[None] | None = None

    def waiting(self, waiter: asyncio.Future[None]) -> None:
        """A wait for bytes starts now (and fails at once when the deadline has passed)."""
        self._waiter = waiter
        self.since_ns = now = self._now_ns()
        total = self._deadline_ns
        if total is not None and now >= total:
            # The timer may have fired while nobody waited (the consumer was busy with
            # bytes): a body that never pauses would otherwise outlive its deadline.
            if not waiter.done():
                self._expire(waiter)
            return
        if self._handle is None:
            due = self._due_ns()
            if due is not None:
                self._arm(now, due)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _due_ns(self) -> int | None:
        read = self.since_ns + self._timeout_ns if self._timeout_ns is not None else None
        total = self._deadline_ns
        if read is None or (total is not None and total < read):
            return total
        return read

    def _arm(self, now_ns: int, due_ns: int) -> None:
        delay_s = max((due_ns - now_ns) / 1e9, _MIN_REARM_S)
        self._handle = self._loop.call_later(delay_s, self._fire)

    def _expire(self, waiter: asyncio.Future[None]) -> None:
        expired = self._expired
        waiter.set_exception(
            expired() if expired is not None else TimeoutError("the deadline passed")
        )

    def _fire(self) -> None:
        self._handle = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # not waiting now: the next wait arms the timer again
        now = self._now_ns()
        due = self._due_ns()
        if due is None:
            return
        if due > now:
            self._arm(now, due)
        elif due == self._deadline_ns:
            self._expire(waiter)
        else:
            waiter.set_exception(httpx.ReadTimeout("no bytes received within the read timeout"))
