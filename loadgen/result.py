"""A replay's result: what the driver did (dispatches, timing, lags, stalls), for run.json
and the summary. Returned by ``loadgen.replay.Replayer.run``.
"""

from __future__ import annotations

from dataclasses import dataclass

from traces.health import LagSummary, PrepareAhead, StallLog

__all__ = ["ReplayResult"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayResult:
    """What the driver did, for run.json and the summary."""

    dispatched: int
    stop_reason: str
    start_ns: int
    end_ns: int
    loop_lag: LagSummary
    schedule_lag: LagSummary
    cpu_utilisation: float
    """The process's CPU time over the replay's wall time (1.0 = one core busy)."""
    cpu_s: float
    """The process's CPU seconds during the replay (start-up and summary excluded)."""
    stamp_delay: LagSummary | None = None
    """How long arrived bytes waited before the loop stamped them (``loadgen.stampdelay``);
    None when the probe could not open its two sockets (descriptors at their limit)."""
    held: LagSummary | None = None
    """Open loop with ``max_inflight``: how long each request the cap held back waited
    (samples: the requests held); None without a cap."""
    dispatch_lag: LagSummary | None = None
    """With ``max_inflight``: the schedule lag net of the cap's hold (the client's own
    lateness); None without a cap (then it is ``schedule_lag``)."""
    warm_connect: LagSummary | None = None
    """Closed loop: the connects of the warm pool opened before the start (one per
    worker; samples: the connections opened), which the first wave's rows then do not
    carry; an open loop's under a start gate (``loadgen.replay._GATED_WARM``); else None."""
    warmup_end_ns: int | None = None
    """With ``warmup_s``: requests due before it are flagged warm-up."""
    dispatch_end_ns: int | None = None
    """With ``duration_s``: when dispatching ended; rows in flight then are ``drain``."""
    stalls: StallLog | None = None
    """Event-loop stalls over the threshold during the replay, with their causes
    (``loadgen.stalls``)."""
    prepare_ahead: PrepareAhead | None = None
    """What the body preparer did (``loadgen.prepare.ahead``); None when none ran."""
