"""The load generator's own health as ``run.json`` records it (``RunInfo.health``): lag
percentiles, per-worker figures, a ``--max-inflight`` cap's hold, and the verdict on
whether the client may have limited the run.

Frozen, slotted, keyword-only values; ``traces.runinfo`` reads and writes them as part of
``run.json`` (and re-exports them). Imports nothing of ours.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

OMIT_NONE: Final = {"omit_none": True}
"""Field metadata: leave the key out of the JSON while the value is None (``run.json``'s
encoder in ``traces.runinfo`` reads it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LagSummary:
    """Percentiles of a lag distribution, in milliseconds."""

    samples: int
    p50_ms: float
    p99_ms: float
    max_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerHealth:
    """One worker process (shard): what it sent and how late it was."""

    shard: int
    dispatched: int
    rows: int
    schedule_lag_ms: LagSummary
    loop_lag_ms: LagSummary
    cpu_utilisation: float
    """CPU seconds over wall seconds of the replay (1.0 = one core busy)."""
    cpu_s: float
    node: str | None = field(default=None, metadata=OMIT_NONE)
    """The Ray node that ran the shard, by its node id (version 6; absent for a shard
    run on the driver's host: ``--workers`` without ``--ray``)."""
    host: str | None = field(default=None, metadata=OMIT_NONE)
    """That Ray node's IP address (version 6; absent with ``node``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Backpressure:
    """What a deliberate ``--max-inflight`` cap did to an open-loop run: the requests it
    held back and for how long, apart from the client's own lateness. ``schedule_lag_ms``
    (and the rows' ``sent_ns - due_ns``) include the hold; ``dispatch_lag_ms`` does not."""

    max_inflight: int
    held: int
    """Requests dispatched after their due time because every slot was taken."""
    hold_ms: LagSummary
    """How long each of those waited for a slot (samples: ``held``)."""
    dispatch_lag_ms: LagSummary
    """Every request's schedule lag net of its hold: the client's own lateness."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Stall:
    """One event-loop stall over the log's threshold: the loop ran nothing for
    ``duration_ms`` (as late as the loop-lag probe woke; the stall may have begun up to one
    probe interval, 10 ms, earlier)."""

    shard: int
    start_s: float
    """When it began, in seconds after the run's start."""
    duration_ms: float
    cause: str
    """What held the loop, where it can be known: ``gc`` (a collection, any thread),
    ``recorder flush`` (the recorder thread writing a batch), ``prompt build``, ``import``;
    ``loop busy``, ``other thread`` (the GIL) or ``host`` (the process was not scheduled);
    see ``loadgen.stalls``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StallLog:
    """Event-loop stalls over ``threshold_ms`` during a replay (version 5): how many, the
    worst, and each (the longest ``MAX_STALLS_LISTED`` of them, in start order)."""

    threshold_ms: float
    count: int
    worst_ms: float
    stalls: tuple[Stall, ...]


MAX_STALLS_LISTED: Final = 100
"""The most stalls ``StallLog.stalls`` lists (the longest); ``count`` counts them all."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PrepareAhead:
    """Request bodies built ahead of their due times in a process of their own (version 5,
    ``loadgen.prepare.ahead``): why the trace needed it, the look-ahead's bound, what it
    built, and how often the event loop still had to wait for a body."""

    reason: str
    """What in the trace started it (images, prompts over the size threshold)."""
    bound_mib: float
    """``--prepare-ahead-mib``: bodies built and not yet taken, at most (one larger body
    alone may pass it)."""
    bodies: int
    """Bodies built ahead and taken by the replay."""
    mib: float
    """Their size in all."""
    peak_mib: float
    """The most body bytes built ahead and not yet taken at any moment."""
    waits: int
    """Requests whose body was not built yet when the replay took it after the start (it
    waited, the loop running meanwhile): a preparer that fell behind the schedule."""
    wait_ms: float
    """Those waits' time in all."""
    start_ms: float
    """How long the process took to start (spawn and imports), before the run's start."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GeneratorHealth:
    """The load generator's own health: the worst lags over workers, the busiest worker's
    CPU use, total CPU seconds, whether the client may have limited the run (and why).
    ``stamp_delay_ms`` (version 4): how long arrived bytes waited before the event loop
    stamped them (``loadgen.stampdelay``); ``backpressure`` (version 4): a ``--max-inflight``
    cap's hold, absent without a cap; ``stalls`` (version 5): the event-loop stalls over
    20 ms of every worker, with their causes; ``prepare_ahead`` (version 5): the body
    preparer, when the trace needed one."""

    schedule_lag_ms: LagSummary
    loop_lag_ms: LagSummary
    cpu_utilisation: float
    cpu_s: float
    client_bound: bool
    warnings: tuple[str, ...]
    workers: tuple[WorkerHealth, ...]
    stamp_delay_ms: LagSummary | None = field(default=None, metadata=OMIT_NONE)
    backpressure: Backpressure | None = field(default=None, metadata=OMIT_NONE)
    stalls: StallLog | None = field(default=None, metadata=OMIT_NONE)
    prepare_ahead: PrepareAhead | None = field(default=None, metadata=OMIT_NONE)
    """Bodies built off the loop ahead of their due times; absent when the trace needed
    none (``PrepareAhead``)."""
