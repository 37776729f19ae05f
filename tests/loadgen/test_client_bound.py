"""The replay's own client-bound verdict (run.json ``health.client_bound``): schedule lag,
event-loop lag and stalls, CPU."""

from __future__ import annotations

from dataclasses import replace

from runbuilders import health, run_info

from loadgen.run.health import backpressure_warning, client_bound_warnings
from traces.health import Backpressure, LagSummary
from traces.runinfo import RunInfo


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


def test_late_stamps_flag_the_run_even_with_a_calm_loop_sampler() -> None:
    def warnings(stamp_delay: LagSummary) -> list[str]:
        return client_bound_warnings(
            schedule_lag=_lag(0.8),
            loop_lag=_lag(3, 30),
            cpu_utilisation=0.4,
            stamp_delay=stamp_delay,
        )

    assert warnings(_lag(1, 20)) == []
    busy = warnings(_lag(35, 60))
    assert len(busy) == 1
    assert "p99 stamp delay 35.0 ms" in busy[0]
    stalled = warnings(_lag(2, 1900))
    assert len(stalled) == 1
    assert "stamp delay of 1900 ms" in stalled[0]


def test_a_cap_hold_is_backpressure_and_round_trips_in_run_json() -> None:
    held = LagSummary(samples=40, p50_ms=80.0, p99_ms=120.0, max_ms=130.0)
    bp = Backpressure(max_inflight=16, held=40, hold_ms=held, dispatch_lag_ms=_lag(0.3))
    assert backpressure_warning(bp) == (
        "backpressure: 40 requests waited for --max-inflight 16; p99 wait 120.0 ms: the "
        "offered load was not the trace's"
    )
    assert backpressure_warning(replace(bp, held=0)) is None
    generator = replace(health(), stamp_delay_ms=_lag(0.2, 3), backpressure=bp)
    info = run_info(generator_health=generator)
    assert RunInfo.from_json(info.to_json()) == info
