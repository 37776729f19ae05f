"""The only reader of time in the replay engine.

One monotonic integer-nanosecond clock (``time.perf_counter_ns``, CLOCK_MONOTONIC on Linux,
shared by all processes of the machine) anchored once to the wall clock, so every stamp is
an epoch-nanosecond value without ever reading the wall clock again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class ClockAnchor:
    """The single pairing of wall-clock and monotonic time taken at run start."""

    wall_ns: int
    mono_ns: int

    @property
    def offset_ns(self) -> int:
        """Add to a monotonic reading to get epoch nanoseconds."""
        return self.wall_ns - self.mono_ns


class Clock:
    """Monotonic epoch-nanosecond clock. ``now_ns()`` is the hot-path call."""

    __slots__ = ("_offset", "anchor")

    def __init__(self, anchor: ClockAnchor | None = None) -> None:
        if anchor is None:
            # Read both as close together as possible; the wall clock is read only here.
            mono = time.perf_counter_ns()
            wall = time.time_ns()
            anchor = ClockAnchor(wall_ns=wall, mono_ns=mono)
        self.anchor = anchor
        self._offset = anchor.offset_ns

    def now_ns(self) -> int:
        """Epoch nanoseconds, from the monotonic clock."""
        return time.perf_counter_ns() + self._offset

    def from_mono_ns(self, mono_ns: int) -> int:
        """Convert a raw ``perf_counter_ns`` reading (this or another process) to epoch ns."""
        return mono_ns + self._offset

    def to_mono_ns(self, epoch_ns: int) -> int:
        """Convert an epoch-ns stamp of this clock back to a raw monotonic reading."""
        return epoch_ns - self._offset
