"""What a TTFT decomposition does (``DecomposeOptions``), shared by the per-request split,
its network and calibration fits, and the report.

Must not import loadgen or httpx.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from analyzers.errors import AnalyzerError
from analyzers.frames import RowSelection
from analyzers.validity import ValidityThresholds


@dataclass(frozen=True, slots=True, kw_only=True)
class DecomposeOptions:
    """What ``decompose`` does. ``network_ms``: a probe's round trip (else estimated from
    the run at ``network_percentile``); ``low_load_quantile``: requests sent with at most
    this quantile of in-flight requests calibrate; an overshoot beyond
    ``max(overshoot_tolerance_ms, overshoot_tolerance x server side)`` is flagged.
    ``time_scale``: the server's wall seconds per second of its own clock (a simulator's
    ``--time-scale``); the client-measured durations are divided by it so that every term
    is on the server's clock, like its timings and the budget's predictions.
    ``load_aware``: predict at the run's load by replaying it through the scheduler (at
    most ``max_replay_steps`` engine steps), instead of at batch 1."""

    percentiles: tuple[float, ...] = (50.0, 90.0, 99.0, 99.9)
    by_workload: bool = True
    selection: RowSelection = field(default_factory=RowSelection)
    slo_ttft_ms: float | None = None
    hide_server_timings: bool = False
    calibrate: bool = False
    network_ms: float | None = None
    network_percentile: float = 5.0
    low_load_quantile: float = 0.25
    overshoot_tolerance_ms: float = 1.0
    overshoot_tolerance: float = 0.05
    window_s: float | None = None
    queue_dominates_share: float = 0.5
    thresholds: ValidityThresholds = field(default_factory=ValidityThresholds)
    time_scale: float = 1.0
    load_aware: bool = True
    max_replay_steps: int = 200_000

    def __post_init__(self) -> None:
        if not self.time_scale > 0:
            raise AnalyzerError(f"time_scale must be > 0, got {self.time_scale}")
