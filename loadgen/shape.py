"""A replay's shape: how its requests are dispatched (open or closed loop, rates, caps,
duration, warm-up), and the start gate a sharded run's replays wait on together.

Values given to ``loadgen.replay.Replayer`` by the run (``loadgen.run``) and the bench.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["LoadShape", "StartGate"]

StartGate = Callable[[], Awaitable[int]]
"""Awaited once the replay is ready to send (warm pool connected, the first requests
prepared); returns the common start (epoch ns) every shard of the run waits for
(``loadgen.run.workers``, ``loadgen.run.ray``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadShape:
    """How requests are dispatched."""

    concurrency: int | None = None
    """Closed loop with this many requests in flight; None for open loop."""
    time_factor: float = 1.0
    """Open loop: multiplier of the trace's inter-arrival gaps."""
    max_rate: float | None = None
    """Closed loop: ceiling on dispatches per second."""
    max_rate_phase_ns: int = 0
    """Closed loop: when the first ``max_rate`` slot is due, after the start (shards sharing
    one rate offset their slots so that together they are evenly spaced)."""
    max_inflight: int | None = None
    """Open loop: cap on requests in flight (dispatch waits; lateness is recorded)."""
    duration_s: float | None = None
    """Stop dispatching after this many seconds."""
    grace_s: float = 5.0
    """After a stop, how long in-flight requests may finish before they are cancelled."""
    closed_sessions: bool = False
    """Open loop: a session's turn waits for its parent's end plus think time
    (``loadgen.turns``)."""
    max_sessions: int | None = None
    """Closed sessions: cap on sessions in progress."""
    live_history: bool = False
    """Closed sessions: a turn's history is what the server replied (``loadgen.history``),
    not the trace's."""
    warmup_s: float | None = None
    """Requests due in the first this many seconds are flagged warm-up."""

    @property
    def mode(self) -> str:
        return "closed" if self.concurrency is not None else "open"
