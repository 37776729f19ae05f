"""The replay's own client-bound verdict (run.json ``health.client_bound``): schedule lag,
event-loop lag and stalls, CPU."""

from __future__ import annotations

from loadgen.run.session import client_bound_warnings
from traces.runinfo import LagSummary


def _lag(p99_ms: float, max_ms: float | None = None) -> LagSummary:
    return LagSummary(samples=1000, p50_ms=p99_ms / 4, p99_ms=p99_ms, max_ms=max_ms or p99_ms)


def test_a_healthy_client_is_not_flagged() -> None:
    assert (
        client_bound_warnings(schedule_lag=_lag(1), loop_lag=_lag(2, 40), cpu_utilisation=0.3) == []
    )


def test_event_loop_stalls_flag_the_run_even_with_sends_on_time() -> None:
    # 10,000 streams, stalls up to 2 s: sends on time, stamps late.
    stalled = client_bound_warnings(
        schedule_lag=_lag(0.8), loop_lag=_lag(6, 2000), cpu_utilisation=0.5
    )
    assert len(stalled) == 1
    assert "stall of 2000 ms" in stalled[0]
    busy = client_bound_warnings(
        schedule_lag=_lag(0.8), loop_lag=_lag(45, 300), cpu_utilisation=0.5
    )
    assert len(busy) == 1  # the p99 says it; the stall is not repeated
    assert "event-loop lag 45.0 ms" in busy[0]


def test_late_sends_and_a_busy_core_each_flag() -> None:
    both = client_bound_warnings(schedule_lag=_lag(9), loop_lag=_lag(1), cpu_utilisation=0.9)
    assert len(both) == 2
