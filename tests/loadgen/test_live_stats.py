"""``LiveStats``: what a finished request adds, and histograms that take their values in
batches yet read as if each had been recorded on its own."""

from __future__ import annotations

import random

from hdrh.histogram import HdrHistogram
from runbuilders import request_record

from loadgen.live import LiveStats, lag_histogram
from traces import schema as s
from traces.records import RunRow, run_row


def _row(i: int, *, lag_us: int, ttft_us: int | None, outcome: str = s.OUTCOME_OK) -> RunRow:
    due = 1_000_000_000 + i * 1_000_000
    sent = due + lag_us * 1000 + 999  # the sub-microsecond rest is dropped, as before
    first = None if ttft_us is None else sent + ttft_us * 1000
    return run_row(
        request_record(
            i,
            f"q{i}",
            due_ns=due,
            sent_ns=sent,
            first_token_ns=first,
            end_ns=sent + 5_000_000,
            outcome=outcome,
            chunk_offsets_us=[1, 2],
        )
    )


def _same(a: HdrHistogram, b: HdrHistogram) -> bool:
    return (
        a.get_total_count() == b.get_total_count()
        and all(
            a.get_value_at_percentile(q) == b.get_value_at_percentile(q)
            for q in (0, 1, 10, 50, 90, 99, 99.9, 100)
        )
        and a.encode() == b.encode()
    )


def test_histograms_equal_one_value_at_a_time_across_folds_and_reads() -> None:
    rng = random.Random(7)
    stats = LiveStats(lambda: 0)
    lag_ref, ttft_ref = lag_histogram(), lag_histogram()
    for i in range(3000):  # past two folds of 1,024, with reads in between
        lag = rng.choice([0, 1, 17, 250, 251, 4_000, rng.randrange(1, 2_000_000)])
        ttft = None if i % 11 == 0 else rng.randrange(1, 500_000)
        stats.on_record(_row(i, lag_us=lag, ttft_us=ttft))
        lag_ref.record_value(max(1, lag))
        if ttft is not None:
            ttft_ref.record_value(max(1, ttft))
        if i in (5, 1500):
            assert _same(stats.schedule_lag_us, lag_ref)
            assert _same(stats.ttft_us, ttft_ref)
    assert _same(stats.schedule_lag_us, lag_ref)
    assert _same(stats.ttft_us, ttft_ref)
    assert stats.schedule_lag_us.get_total_count() == 3000
    snap = stats.snapshot()
    assert snap.done == 3000
    assert snap.ttft_p99_ms == ttft_ref.get_value_at_percentile(99) / 1000
    assert HdrHistogram.decode(stats.report(0).ttft_us_encoded).get_total_count() == (
        ttft_ref.get_total_count()
    )


def test_counters_by_outcome_and_tokens() -> None:
    stats = LiveStats(lambda: 0)
    stats.on_record(_row(0, lag_us=5, ttft_us=100))
    stats.on_record(_row(1, lag_us=5, ttft_us=None, outcome=s.OUTCOME_TIMEOUT))
    assert (stats.done, stats.ok, stats.errors) == (2, 1, 1)
    assert stats.by_outcome == {s.OUTCOME_OK: 1, s.OUTCOME_TIMEOUT: 1}
    assert stats.output_tokens == 4  # two chunks each, no usage
    assert stats.ttft_us.get_total_count() == 1
