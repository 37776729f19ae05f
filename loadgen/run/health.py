"""The generator's health over a run's shards: their replays merged into one view, what a
``--max-inflight`` cap held back, and the warnings that the client, not the server, may
have limited the run or skewed its stamps (``run.json``'s ``health``, ``traces.health``).

Pure functions of the shards' results; ``loadgen.run.session`` calls them as the run ends.
Imports ``loadgen.replay``, ``loadgen.run.shard`` and ``traces`` only.
"""

from __future__ import annotations

from loadgen.prepare.ahead import merge_prepare_ahead
from loadgen.replay import ReplayResult
from loadgen.run.shard import ShardOutcome
from loadgen.stalls import merge_stall_logs
from traces.health import Backpressure, LagSummary, StallLog

__all__ = [
    "CLIENT_BOUND_CPU",
    "CLIENT_BOUND_LAG_MS",
    "CLIENT_BOUND_LOOP_LAG_MS",
    "CLIENT_BOUND_STALL_MS",
    "CLIENT_BOUND_STAMP_DELAY_MS",
    "CLIENT_BOUND_STAMP_STALL_MS",
    "backpressure_of",
    "backpressure_warning",
    "client_bound_warnings",
    "merge_held",
    "merge_results",
    "stall_warning",
]

CLIENT_BOUND_LAG_MS = 5.0
"""p99 schedule lag above which the client, not the server, may be limiting the run."""
CLIENT_BOUND_LOOP_LAG_MS = 20.0
"""p99 event-loop lag above which the client's stamps (and sends) are late too often."""
CLIENT_BOUND_STALL_MS = 100.0
"""Longest event-loop stall above which the run is flagged: every chunk that arrived during
it was stamped late by up to that much, which reads as server latency (a 2 s stall among
10,000 streams added 1.9 s to TTFT while the schedule lag stayed low)."""
CLIENT_BOUND_STAMP_DELAY_MS = 20.0
"""p99 stamp delay (arrived bytes waiting for the loop to stamp them) above which the
run's latencies carry client time (``loadgen.stampdelay``)."""
CLIENT_BOUND_STAMP_STALL_MS = 100.0
"""Longest stamp delay above which the run is flagged: a read stamped that late adds that
much to a TTFT or an ITL."""
CLIENT_BOUND_CPU = 0.7
"""Share of one core a worker may use before the run is flagged client-bound."""


def merge_results(outcomes: list[ShardOutcome]) -> ReplayResult:
    """One view of all shards: sums, the earliest start, the latest end, the worst lags."""
    replays = [o.replay for o in outcomes]

    def worst(lags: list[LagSummary]) -> LagSummary:
        return max(lags, key=lambda lag: lag.p99_ms)

    def worst_of(lags: list[LagSummary | None]) -> LagSummary | None:
        known = [lag for lag in lags if lag is not None]
        return worst(known) if known else None

    reasons = {r.stop_reason for r in replays}
    return ReplayResult(
        dispatched=sum(r.dispatched for r in replays),
        stop_reason="interrupted" if "interrupted" in reasons else sorted(reasons)[0],
        start_ns=min(r.start_ns for r in replays),
        end_ns=max(r.end_ns for r in replays),
        loop_lag=worst([r.loop_lag for r in replays]),
        schedule_lag=worst([r.schedule_lag for r in replays]),
        cpu_utilisation=max(r.cpu_utilisation for r in replays),
        cpu_s=sum(r.cpu_s for r in replays),
        stamp_delay=worst_of([r.stamp_delay for r in replays]),
        held=merge_held([r.held for r in replays]),
        dispatch_lag=worst_of([r.dispatch_lag for r in replays]),
        warmup_end_ns=min((r.warmup_end_ns for r in replays if r.warmup_end_ns), default=None),
        dispatch_end_ns=min(
            (r.dispatch_end_ns for r in replays if r.dispatch_end_ns), default=None
        ),
        stalls=merge_stall_logs([r.stalls for r in replays if r.stalls is not None]),
        prepare_ahead=merge_prepare_ahead([r.prepare_ahead for r in replays]),
    )


STALL_WARNING_MS = 50.0
"""An event-loop stall longer than this is named in the run's warnings (and ``analyze``'s
validity: a ``stall`` caveat)."""


def stall_warning(log: StallLog | None) -> str | None:
    """One line on the stalls over ``STALL_WARNING_MS`` (None when there were none)."""
    if log is None or log.worst_ms <= STALL_WARNING_MS:
        return None
    long = [s for s in log.stalls if s.duration_ms > STALL_WARNING_MS]
    worst = max(long, key=lambda s: s.duration_ms)
    causes = sorted({s.cause for s in long})
    return (
        f"event-loop stall: {len(long)} over {STALL_WARNING_MS:g} ms, the worst "
        f"{worst.duration_ms:.0f} ms at {worst.start_s:.1f} s (cause: {', '.join(causes)}; "
        "run.json health.stalls): stamps during it were late by up to that"
    )


def merge_held(helds: list[LagSummary | None]) -> LagSummary | None:
    """The cap's holds over shards: every shard's held requests, the worst p99 and max."""
    known = [h for h in helds if h is not None]
    if not known:
        return None
    busiest = max(known, key=lambda h: h.p99_ms)
    return LagSummary(
        samples=sum(h.samples for h in known),
        p50_ms=busiest.p50_ms,
        p99_ms=busiest.p99_ms,
        max_ms=max(h.max_ms for h in known),
    )


def backpressure_of(result: ReplayResult, max_inflight: int | None) -> Backpressure | None:
    """What a ``--max-inflight`` cap held back (None without a cap)."""
    if max_inflight is None or result.held is None or result.dispatch_lag is None:
        return None
    return Backpressure(
        max_inflight=max_inflight,
        held=result.held.samples,
        hold_ms=result.held,
        dispatch_lag_ms=result.dispatch_lag,
    )


def backpressure_warning(bp: Backpressure | None) -> str | None:
    """One line when the cap held requests back: the offered load was not the trace's."""
    if bp is None or bp.held == 0:
        return None
    return (
        f"backpressure: {bp.held} requests waited for --max-inflight {bp.max_inflight}; "
        f"p99 wait {bp.hold_ms.p99_ms:.1f} ms: the offered load was not the trace's"
    )


def client_bound_warnings(
    *,
    schedule_lag: LagSummary,
    loop_lag: LagSummary,
    cpu_utilisation: float,
    stamp_delay: LagSummary | None = None,
) -> list[str]:
    """Why the client, not the server, may have limited the run or skewed its stamps (none:
    it did not): late sends (schedule lag p99, net of a ``--max-inflight`` cap's hold: pass
    the dispatch lag then), a busy event loop (loop lag p99), one long stall (loop lag max:
    the stamps taken in it are late), arrived bytes stamped late (stamp delay p99 or max)
    or a saturated core."""
    warnings: list[str] = []
    if schedule_lag.p99_ms > CLIENT_BOUND_LAG_MS:
        warnings.append(
            f"p99 schedule lag {schedule_lag.p99_ms:.1f} ms exceeds "
            f"{CLIENT_BOUND_LAG_MS:g} ms: the client, not the server, may be limiting this run"
        )
    if loop_lag.p99_ms > CLIENT_BOUND_LOOP_LAG_MS:
        warnings.append(
            f"p99 event-loop lag {loop_lag.p99_ms:.1f} ms exceeds {CLIENT_BOUND_LOOP_LAG_MS:g} "
            "ms: chunks were stamped late, latencies include client time; try --workers"
        )
    elif loop_lag.max_ms > CLIENT_BOUND_STALL_MS:
        warnings.append(
            f"an event-loop stall of {loop_lag.max_ms:.0f} ms (over {CLIENT_BOUND_STALL_MS:g} "
            "ms): chunks arriving during it were stamped up to that late"
        )
    if stamp_delay is not None and stamp_delay.samples:
        if stamp_delay.p99_ms > CLIENT_BOUND_STAMP_DELAY_MS:
            warnings.append(
                f"p99 stamp delay {stamp_delay.p99_ms:.1f} ms exceeds "
                f"{CLIENT_BOUND_STAMP_DELAY_MS:g} ms: arrived bytes waited for the event loop, "
                "latencies include client time; try --workers"
            )
        elif stamp_delay.max_ms > CLIENT_BOUND_STAMP_STALL_MS:
            warnings.append(
                f"a stamp delay of {stamp_delay.max_ms:.0f} ms (over "
                f"{CLIENT_BOUND_STAMP_STALL_MS:g} ms): bytes that arrived then were stamped "
                "that late"
            )
    if cpu_utilisation > CLIENT_BOUND_CPU:
        warnings.append(
            f"a worker used {cpu_utilisation:.0%} of a core (over "
            f"{CLIENT_BOUND_CPU:.0%}): the client may be limiting this run; try --workers"
        )
    return warnings
