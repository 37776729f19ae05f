"""The open loop's in-flight cap (``LoadShape.max_inflight``): the slots a request takes
before it is sent, and the split of each capped request's lateness into the cap's hold and
the client's own (``ReplayResult.held``, ``ReplayResult.dispatch_lag``).

A request due before the dispatcher last had to wait for a slot was held by the cap until
then; whatever lateness follows is the client's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from loadgen.live import lag_histogram, summarize_us
from traces.health import LagSummary
from traces.records import RunRow

__all__ = ["InflightCap"]


class InflightCap:
    """At most ``cap`` requests in flight; ``now_ns``: the run's clock."""

    def __init__(self, cap: int, now_ns: Callable[[], int]) -> None:
        self._slot = asyncio.Semaphore(cap)
        self._now_ns = now_ns
        self._released_ns = 0
        """When the dispatcher last got a slot it had to wait for."""
        self._held_us = lag_histogram()
        """Each held request's wait for the cap (us)."""
        self._dispatch_lag_us = lag_histogram()
        """Each request's schedule lag net of that wait (us)."""

    async def acquire(self, due_ns: int) -> int:
        """Take a slot for the request due at ``due_ns``; returns how long the cap held it."""
        if self._slot.locked():
            await self._slot.acquire()
            self._released_ns = self._now_ns()
        else:
            await self._slot.acquire()
        return max(0, self._released_ns - due_ns)

    def release(self) -> None:
        self._slot.release()

    def sink(self, record_sink: Callable[[RunRow], None], held_ns: int) -> Callable[[RunRow], None]:
        """``record_sink``, first noting the cap's share of the record's lateness
        (``held_ns``) and the client's own rest."""
        dispatch_lag, held_us = self._dispatch_lag_us, self._held_us

        def sink(record: RunRow) -> None:
            if record.sent_ns is not None:
                lag = max(0, record.sent_ns - record.due_ns)
                held = min(held_ns, lag)
                if held > 0:
                    held_us.record_value(max(1, held // 1000))
                dispatch_lag.record_value(max(1, (lag - held) // 1000))
            record_sink(record)

        return sink

    def held(self) -> LagSummary:
        return summarize_us(self._held_us)

    def dispatch_lag(self) -> LagSummary:
        return summarize_us(self._dispatch_lag_us)
