"""Live statistics of a running replay and the generator's own health.

``LiveStats`` keeps counters and HdrHistograms (mergeable across workers) fed by the
replay; ``LoopLagMonitor`` samples event-loop lag. Both are cheap enough for the hot path.
Nothing here prints: the CLI renders snapshots.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from hdrh.histogram import HdrHistogram

from loadgen.stalls import StallWatch
from traces import schema as s
from traces.health import LagSummary
from traces.records import RunRow

_MAX_US = 3_600_000_000  # one hour, in microseconds
_FOLD_VALUES = 1024
"""Values a ``LiveStats`` histogram takes in at once (``_fold``)."""


def _histogram() -> HdrHistogram:
    return HdrHistogram(1, _MAX_US, 3)


def lag_histogram() -> HdrHistogram:
    """An empty microsecond histogram of the kind ``summarize_us`` reads (1 us to 1 h)."""
    return _histogram()


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveSnapshot:
    """A consistent view of the counters, for display."""

    dispatched: int
    done: int
    ok: int
    errors: int
    in_flight: int
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    output_tokens: int
    elapsed_s: float


class StatsView(Protocol):
    """Anything a progress display can poll."""

    def snapshot(self) -> LiveSnapshot: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerReport:
    """A worker's counters and its TTFT histogram in HdrHistogram's mergeable encoding,
    sent to the parent process for the aggregated live view."""

    shard: int
    dispatched: int
    done: int
    ok: int
    errors: int
    output_tokens: int
    ttft_us_encoded: bytes


class LiveStats:
    """Counters and latency histograms of a run, updated as requests finish.

    A finished request's two histogram values are appended to a list, and the lists are
    folded into the histograms a distinct value at a time (``record_value(value, count)``:
    the same histogram) every ``_FOLD_VALUES`` values and whenever a histogram is read.
    HdrHistogram's ``record_value`` is Python, 1.5 µs a call alone and more inside a busy
    replay; at 5,000 requests a second the two calls a request cost 0.03 of a core, and
    values in microseconds repeat (a 1,024-value batch of a replay's lateness or TTFT
    holds a few hundred distinct ones)."""

    def __init__(self, now_ns: Callable[[], int]) -> None:
        self._now_ns = now_ns
        self._start_ns = now_ns()
        self.dispatched = 0
        self.done = 0
        self.ok = 0
        self.errors = 0
        self.output_tokens = 0
        self._ttft_us = _histogram()
        self._schedule_lag_us = _histogram()
        self._ttft_values: list[int] = []
        self._lag_values: list[int] = []
        self.by_outcome: dict[str, int] = {}

    @property
    def ttft_us(self) -> HdrHistogram:
        """Every request's TTFT so far, µs."""
        self._fold()
        return self._ttft_us

    @property
    def schedule_lag_us(self) -> HdrHistogram:
        """Every sent request's lateness (sent - due) so far, µs."""
        self._fold()
        return self._schedule_lag_us

    def _fold(self) -> None:
        for values, hist in (
            (self._lag_values, self._schedule_lag_us),
            (self._ttft_values, self._ttft_us),
        ):
            if values:
                record = hist.record_value
                for value, count in Counter(values).items():
                    record(value, count)
                values.clear()

    def on_dispatch(self) -> None:
        self.dispatched += 1

    def on_record(self, record: RunRow) -> None:
        """Account one finished request."""
        self.done += 1
        self.by_outcome[record.outcome] = self.by_outcome.get(record.outcome, 0) + 1
        if record.outcome == s.OUTCOME_OK:
            self.ok += 1
        else:
            self.errors += 1
        sent = record.sent_ns
        if sent is not None:
            lag = self._lag_values
            lag.append(max(1, (sent - record.due_ns) // 1000))
            if record.first_token_ns is not None:
                self._ttft_values.append(max(1, (record.first_token_ns - sent) // 1000))
            if len(lag) >= _FOLD_VALUES:
                self._fold()
        if record.completion_tokens is not None:
            self.output_tokens += record.completion_tokens
        else:
            self.output_tokens += len(record.chunk_offsets_us)

    def report(self, shard: int) -> WorkerReport:
        """The counters and the encoded TTFT histogram, for the parent process."""
        return WorkerReport(
            shard=shard,
            dispatched=self.dispatched,
            done=self.done,
            ok=self.ok,
            errors=self.errors,
            output_tokens=self.output_tokens,
            ttft_us_encoded=self.ttft_us.encode(),
        )

    def snapshot(self) -> LiveSnapshot:
        have = self.ttft_us.get_total_count() > 0
        return LiveSnapshot(
            dispatched=self.dispatched,
            done=self.done,
            ok=self.ok,
            errors=self.errors,
            in_flight=self.dispatched - self.done,
            ttft_p50_ms=self.ttft_us.get_value_at_percentile(50) / 1000 if have else None,
            ttft_p99_ms=self.ttft_us.get_value_at_percentile(99) / 1000 if have else None,
            output_tokens=self.output_tokens,
            elapsed_s=(self._now_ns() - self._start_ns) / 1e9,
        )


class AggregateStats:
    """The live view of several workers, merged from their latest reports."""

    def __init__(self, now_ns: Callable[[], int]) -> None:
        self._now_ns = now_ns
        self._start_ns = now_ns()
        self._latest: dict[int, WorkerReport] = {}

    def update(self, report: WorkerReport) -> None:
        self._latest[report.shard] = report

    def snapshot(self) -> LiveSnapshot:
        reports = list(self._latest.values())
        merged = _histogram()
        for r in reports:
            merged.decode_and_add(r.ttft_us_encoded)
        have = merged.get_total_count() > 0
        dispatched = sum(r.dispatched for r in reports)
        done = sum(r.done for r in reports)
        return LiveSnapshot(
            dispatched=dispatched,
            done=done,
            ok=sum(r.ok for r in reports),
            errors=sum(r.errors for r in reports),
            in_flight=dispatched - done,
            ttft_p50_ms=merged.get_value_at_percentile(50) / 1000 if have else None,
            ttft_p99_ms=merged.get_value_at_percentile(99) / 1000 if have else None,
            output_tokens=sum(r.output_tokens for r in reports),
            elapsed_s=(self._now_ns() - self._start_ns) / 1e9,
        )


def summarize_us(hist: HdrHistogram) -> LagSummary:
    """Percentiles of a microsecond histogram, in ms."""
    n = hist.get_total_count()
    if n == 0:
        return LagSummary(samples=0, p50_ms=0.0, p99_ms=0.0, max_ms=0.0)
    return LagSummary(
        samples=n,
        p50_ms=hist.get_value_at_percentile(50) / 1000,
        p99_ms=hist.get_value_at_percentile(99) / 1000,
        max_ms=hist.get_max_value() / 1000,
    )


class LoopLagMonitor:
    """Samples how late the event loop wakes a sleeper (its lag), every ``interval_s``."""

    def __init__(self, interval_s: float = 0.01, stalls: StallWatch | None = None) -> None:
        """``stalls``: told of every wake-up, to log the stalls over its threshold."""
        self._interval_s = interval_s
        self._stalls = stalls
        self.lag_us = _histogram()
        self._cpu_start = time.process_time()
        self._wall_start = time.perf_counter()

    async def run(self) -> None:
        """Sample until cancelled."""
        interval_ns = int(self._interval_s * 1e9)
        record = self.lag_us.record_value
        tick = self._stalls.tick if self._stalls is not None else None
        while True:
            before = time.perf_counter_ns()
            await asyncio.sleep(self._interval_s)
            woke = time.perf_counter_ns()
            lag = woke - before - interval_ns
            record(max(1, lag // 1000))
            if tick is not None:
                tick(woke, lag)

    def cpu_seconds(self) -> float:
        """Process CPU time (user + system, all threads) since construction."""
        return time.process_time() - self._cpu_start

    def cpu_utilisation(self) -> float:
        """Process CPU time over wall time since construction (1.0 = one core busy)."""
        wall = time.perf_counter() - self._wall_start
        return self.cpu_seconds() / wall if wall > 0 else 0.0
