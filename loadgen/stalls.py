"""Event-loop stalls over a threshold (20 ms), with their causes where they can be known.

A stall is seen by the loop-lag probe (``loadgen.live.LoopLagMonitor``): a sleeper due at
``t`` that wakes at ``t + lag`` saw the loop run nothing for at least ``lag`` (at most one
probe interval, 10 ms, more). No thread of our own watches the loop: a thread needs the GIL
to look, so it would see a GIL-holding stall only after it anyway, and it would cost a
wake-up every few milliseconds.

Causes come from timing the spots known to hold the loop or the GIL, each only when it
lasted at least ``SPAN_MIN_NS`` (so the common short ones cost two clock reads):

- ``gc``: a collection (``gc.callbacks``; in any thread, it holds the GIL throughout);
- ``recorder flush``: the recorder thread converting and appending a batch (it holds the
  GIL for part of that);
- ``prompt build``: a request's prompt and body built on the loop;
- ``import``: modules loaded during the stall (``sys.modules`` grew: an import on the loop
  holds it for the whole import).

The cause given is the timed span overlapping the stall most, if it covers half of it at
least, then ``import``; else the
CPU clocks say where the time went (read at every probe wake-up, so over the stall and at
most one interval before it):

- ``loop busy``: the loop's thread ran for a quarter of the stall or more (on a busy host
  the rest is waiting for a core): code of ours or a library's on the loop, not one of
  the timed spots;
- ``other thread``: the process ran as long but not the loop's thread (a thread of ours
  held the GIL: the recorder, the scraper, a library's);
- ``host``: the process hardly ran at all: the host did not schedule it (other processes
  on its cores, a CPU quota, memory pressure, a paused VM).

DNS is not among them: name lookups run in the loop's executor (``getaddrinfo`` in a thread), not
on the loop. Bounded: spans in a ring of ``_SPANS``; at most ``MAX_STALLS_LISTED`` stalls
kept (the longest), every one counted.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from traces.health import MAX_STALLS_LISTED, Stall, StallLog

STALL_THRESHOLD_MS = 20.0
"""A loop lag beyond this is a stall, logged with its cause."""
SPAN_MIN_NS = 1_000_000
"""Timed spots shorter than this are not kept (they cannot explain a 20 ms stall)."""
_SPANS = 512

GC = "gc"
RECORDER_FLUSH = "recorder flush"
PROMPT_BUILD = "prompt build"
IMPORT = "import"
LOOP_BUSY = "loop busy"
OTHER_THREAD = "other thread"
HOST = "host"
UNKNOWN = "unknown"


class StallWatch:
    """Collects timed spans of the known blocking spots and the stalls the loop-lag probe
    reports, on ``time.perf_counter_ns`` (CLOCK_MONOTONIC). ``span`` and ``mark`` are safe
    from any thread (a deque's append is atomic)."""

    def __init__(self, *, shard: int = 0, threshold_ms: float = STALL_THRESHOLD_MS) -> None:
        self.shard = shard
        self.threshold_ms = threshold_ms
        self._threshold_ns = int(threshold_ms * 1e6)
        self._spans: deque[tuple[int, int, str]] = deque(maxlen=_SPANS)
        self._stalls: list[tuple[int, int, str]] = []
        self._count = 0
        self._worst_ns = 0
        self._modules = len(sys.modules)
        self._thread_cpu = time.thread_time_ns()
        self._process_cpu = time.process_time_ns()
        self._gc_start = 0

    def mark(self, cause: str, start_ns: int, end_ns: int) -> None:
        """A known blocking spot ran from ``start_ns`` to ``end_ns`` (perf_counter_ns)."""
        if end_ns - start_ns >= SPAN_MIN_NS:
            self._spans.append((start_ns, end_ns, cause))

    @contextmanager
    def span(self, cause: str) -> Iterator[None]:
        """Time the block as ``cause``."""
        start = time.perf_counter_ns()
        try:
            yield
        finally:
            self.mark(cause, start, time.perf_counter_ns())

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter_ns()
        elif self._gc_start:
            self.mark(GC, self._gc_start, time.perf_counter_ns())

    def watch_gc(self) -> None:
        """Time every collection from now until ``unwatch_gc``."""
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)

    def unwatch_gc(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._on_gc)

    def tick(self, wake_ns: int, lag_ns: int) -> None:
        """The probe woke at ``wake_ns``, ``lag_ns`` late (called on every wake-up)."""
        modules = len(sys.modules)
        thread_cpu, process_cpu = time.thread_time_ns(), time.process_time_ns()
        if lag_ns > self._threshold_ns:
            start = wake_ns - lag_ns
            self._count += 1
            self._worst_ns = max(self._worst_ns, lag_ns)
            cause = self._span_cause(start, wake_ns)
            if cause == UNKNOWN:
                if modules > self._modules:
                    cause = IMPORT
                else:
                    on_loop = thread_cpu - self._thread_cpu
                    elsewhere = process_cpu - self._process_cpu - on_loop
                    cause = cpu_cause(lag_ns, on_loop, elsewhere)
            self._stalls.append((start, lag_ns, cause))
            if len(self._stalls) > 4 * MAX_STALLS_LISTED:
                self._stalls = self._longest()
        self._modules = modules
        self._thread_cpu, self._process_cpu = thread_cpu, process_cpu

    def _span_cause(self, start: int, end: int) -> str:
        best, overlap = UNKNOWN, (end - start) // 2 - 1
        for s0, s1, cause in self._snapshot():
            common = min(end, s1) - max(start, s0)
            if common > overlap:
                best, overlap = cause, common
        return best

    def _snapshot(self) -> tuple[tuple[int, int, str], ...]:
        """The spans as they are now: other threads append to them (the recorder's, and a
        collection's callback in whichever thread it runs), and iterating the deque while
        one does fails ("deque mutated during iteration"); the copy is one C call, retried
        if an append came in the middle of it."""
        while True:
            try:
                return tuple(self._spans)
            except RuntimeError:
                continue

    def _longest(self) -> list[tuple[int, int, str]]:
        kept = sorted(self._stalls, key=lambda s: s[1], reverse=True)[:MAX_STALLS_LISTED]
        return sorted(kept)

    def log(self, origin_ns: int) -> StallLog:
        """The stalls so far; start offsets count from ``origin_ns`` (perf_counter_ns of
        the run's start)."""
        return StallLog(
            threshold_ms=self.threshold_ms,
            count=self._count,
            worst_ms=round(self._worst_ns / 1e6, 3),
            stalls=tuple(
                Stall(
                    shard=self.shard,
                    start_s=round((start - origin_ns) / 1e9, 6),
                    duration_ms=round(lag / 1e6, 3),
                    cause=cause,
                )
                for start, lag, cause in self._longest()
            ),
        )


def cpu_cause(stall_ns: int, loop_cpu_ns: int, other_cpu_ns: int) -> str:
    """Where a stall's time went, from the CPU the loop's thread and the rest of the
    process used over it: ``loop busy``, ``other thread`` or ``host``."""
    if loop_cpu_ns >= stall_ns // 4 and loop_cpu_ns >= other_cpu_ns:
        return LOOP_BUSY
    if other_cpu_ns >= stall_ns // 4:
        return OTHER_THREAD
    return HOST


def merge_stall_logs(logs: list[StallLog]) -> StallLog | None:
    """Several shards' logs as one (the longest ``MAX_STALLS_LISTED``, by start)."""
    if not logs:
        return None
    longest = sorted(
        (s for log in logs for s in log.stalls), key=lambda s: s.duration_ms, reverse=True
    )[:MAX_STALLS_LISTED]
    return StallLog(
        threshold_ms=max(log.threshold_ms for log in logs),
        count=sum(log.count for log in logs),
        worst_ms=max(log.worst_ms for log in logs),
        stalls=tuple(sorted(longest, key=lambda s: (s.start_s, s.shard))),
    )
