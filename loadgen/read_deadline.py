"""The read timeout of a streamed response body, for ``loadgen.fasttransport``."""

from __future__ import annotations

import asyncio

import httpx


class ReadDeadline:
    """The read timeout of one body: a wait for bytes that lasts ``timeout_s`` fails.

    One timer serves every wait (one wait per socket read): arming and cancelling a timer
    each time costs more than the rest of the wait. A wait only notes its waiter and its
    start; the timer, when it fires for an earlier wait, moves to the current one's
    deadline, so a wait still fails exactly ``timeout_s`` after it started.
    """

    __slots__ = ("_armed_for", "_handle", "_loop", "_since", "_timeout_s", "_waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        self._loop = loop
        self._timeout_s = timeout_s
        self._handle: asyncio.TimerHandle | None = None
        self._armed_for = 0.0
        self._since = 0.0
        self._waiter: asyncio.Future[None] | None = None

    def waiting(self, waiter: asyncio.Future[None]) -> None:
        """A wait for bytes starts now."""
        self._waiter = waiter
        self._since = self._loop.time()
        if self._handle is None:
            self._arm(self._since + self._timeout_s)

    def restart(self) -> None:
        """Bytes came and the same wait goes on (``drain``): it starts again now."""
        self._since = self._loop.time()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self, when: float) -> None:
        self._armed_for = when
        self._handle = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._handle = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # not waiting now: the next wait arms the timer again
        deadline = self._since + self._timeout_s
        if deadline > self._armed_for:
            self._arm(deadline)
        else:
            waiter.set_exception(httpx.ReadTimeout("no bytes received within the read timeout"))
