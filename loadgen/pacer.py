"""Pacing: when each dispatch of a closed loop under a rate ceiling (``--max-rate``) may go.

Slot k is due at ``origin + k * period``, computed from the origin each time, never by
adding a period to the previous due time: a late wake-up delays one dispatch and shortens
the wait of the next, so the long-run rate is the one asked however coarse the event
loop's timers are. A dispatch whose worker became ready after its slot had passed (every
slot was in flight: the concurrency, not the ceiling, was binding) may make up at most
``slack_ns`` of passed slots; older ones are skipped, so a stall is never answered with a
burst of more than ``slack_ns`` worth of slots. Skipping keeps the grid: shards that offset
their origins stay interleaved even if one of them starts late.

Pure arithmetic on the caller's integer-ns timestamps: reads no clock, imports nothing of
ours.
"""

from __future__ import annotations

import math

DEFAULT_SLACK_NS = 100_000_000
"""100 ms: a generator stall on a busy machine (tens of ms were measured) is made up, so it
does not cost the run its rate, while after a stalled server at most 100 ms of slots go
out at once, as fast as the free workers allow."""


class Pacer:
    """Hands out the due times of successive dispatches at ``rate_per_s``.

    Not thread-safe, and needs none: the workers of one event loop call ``claim`` between
    awaits.
    """

    __slots__ = ("_k", "_origin_ns", "_period_ns", "_slack_ns")

    def __init__(
        self, *, rate_per_s: float, origin_ns: int, slack_ns: int = DEFAULT_SLACK_NS
    ) -> None:
        """``origin_ns``: when slot 0 is due (the run's start, plus a shard's phase)."""
        if not rate_per_s > 0:
            raise ValueError(f"rate_per_s must be positive, got {rate_per_s}")
        if slack_ns < 0:
            raise ValueError(f"slack_ns must be >= 0, got {slack_ns}")
        self._period_ns = 1e9 / rate_per_s
        self._origin_ns = origin_ns
        self._slack_ns = slack_ns
        self._k = 0

    def claim(self, ready_ns: int) -> int:
        """Take the next slot for a dispatch ready at ``ready_ns``; return when it may go
        (ns, on the caller's clock): the slot's due time, or ``ready_ns`` if that is later.
        """
        period = self._period_ns
        due = self._origin_ns + round(self._k * period)
        floor = ready_ns - self._slack_ns
        if due < floor:
            # Slots that passed beyond the slack are given up: skip to the first one after.
            self._k += math.ceil((floor - due) / period)
            due = self._origin_ns + round(self._k * period)
        self._k += 1
        return due if due > ready_ns else ready_ns
