"""Run validity: may these numbers be trusted as a measurement of the server?

Three flags, each with the reasons that raised it:

- ``client_bound``: the generator, not the server, limited the run, or its clock readings
  cannot be trusted: the p99 schedule lag (``sent - due``, from the rows), the event-loop
  lag p99 or the longest event-loop stall (``run.json`` health) exceeds its threshold. A
  stall delays every arrival stamped during it (a first token stamped late reads as a
  slow server), so one long stall is enough even when the p99 is low.
- ``unfaithful``: the prompts were not what the trace asked for: the median
  ``|prompt_tokens / requested - 1|`` exceeds the tolerance (5% by default).
- ``too_small``: a reported percentile rests on too few requests: percentile ``p`` of a
  class needs ``ceil(factor / (1 - p/100))`` requests (p99: 100, p99.9: 1000).

Every report and gate receives one ``RunValidity``. Pure values and arithmetic: it must
not depend on loadgen, httpx or polars.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

FlagKind = Literal["client_bound", "unfaithful", "too_small"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidityThresholds:
    """Where a run stops being valid. Lags in ms, the prompt tolerance as a fraction."""

    max_schedule_lag_p99_ms: float = 5.0
    max_loop_lag_p99_ms: float = 20.0
    max_loop_stall_ms: float = 100.0
    """The longest event-loop lag (``health.loop_lag_ms.max_ms``): the most a stamp was late."""
    max_cpu_utilisation: float = 0.7
    """A worker's CPU over wall time during the replay (1.0 = one core busy)."""
    max_prompt_error: float = 0.05
    tail_factor: float = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidityFlag:
    """One raised flag and the one-line reason."""

    kind: FlagKind
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassCount:
    """Requests a class's latency percentiles rest on (ok requests)."""

    workload: str
    requests: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RunValidity:
    """The flags raised on a run (none: valid)."""

    flags: tuple[ValidityFlag, ...] = ()

    def _has(self, kind: FlagKind) -> bool:
        return any(f.kind == kind for f in self.flags)

    @property
    def client_bound(self) -> bool:
        """The client limited the run."""
        return self._has("client_bound")

    @property
    def unfaithful(self) -> bool:
        """The prompts did not match the trace."""
        return self._has("unfaithful")

    @property
    def too_small(self) -> bool:
        """Some reported percentile rests on too few requests."""
        return self._has("too_small")

    @property
    def valid(self) -> bool:
        """No flag raised."""
        return not self.flags

    @property
    def reasons(self) -> tuple[str, ...]:
        """The reasons, in flag order."""
        return tuple(f.reason for f in self.flags)


def min_requests_for(percentile: float, factor: float = 1.0) -> int:
    """Requests needed before percentile ``p`` is more than the maximum of a few samples:
    ``ceil(factor / (1 - p/100))`` (p50: 2, p90: 10, p99: 100, p99.9: 1000)."""
    if not 0 <= percentile < 100:
        return 1
    return max(1, math.ceil(round(factor / (1 - percentile / 100), 9)))


def assess_validity(
    *,
    schedule_lag_p99_ms: float | None,
    loop_lag_p99_ms: float | None,
    prompt_error_median: float | None,
    cpu_utilisation: float | None = None,
    loop_lag_max_ms: float | None = None,
    class_counts: Sequence[ClassCount],
    percentiles: Sequence[float],
    thresholds: ValidityThresholds = ValidityThresholds(),
) -> RunValidity:
    """Raise the flags the measurements call for (None inputs raise nothing)."""
    flags: list[ValidityFlag] = []
    t = thresholds
    if schedule_lag_p99_ms is not None and schedule_lag_p99_ms > t.max_schedule_lag_p99_ms:
        flags.append(
            ValidityFlag(
                kind="client_bound",
                reason=f"client-bound: schedule lag p99 {schedule_lag_p99_ms:.1f} ms > "
                f"{t.max_schedule_lag_p99_ms:g} ms (requests were sent late)",
            )
        )
    if loop_lag_p99_ms is not None and loop_lag_p99_ms > t.max_loop_lag_p99_ms:
        flags.append(
            ValidityFlag(
                kind="client_bound",
                reason=f"client-bound: event-loop lag p99 {loop_lag_p99_ms:.1f} ms > "
                f"{t.max_loop_lag_p99_ms:g} ms (run.json health)",
            )
        )
    if (
        loop_lag_max_ms is not None
        and loop_lag_max_ms > t.max_loop_stall_ms
        and not (loop_lag_p99_ms is not None and loop_lag_p99_ms > t.max_loop_lag_p99_ms)
    ):
        flags.append(
            ValidityFlag(
                kind="client_bound",
                reason=f"client-bound: an event-loop stall of {loop_lag_max_ms:.0f} ms > "
                f"{t.max_loop_stall_ms:g} ms (run.json health): arrivals stamped during it "
                "were late by up to that",
            )
        )
    if cpu_utilisation is not None and cpu_utilisation > t.max_cpu_utilisation:
        flags.append(
            ValidityFlag(
                kind="client_bound",
                reason=f"client-bound: a worker used {cpu_utilisation:.0%} of a core > "
                f"{t.max_cpu_utilisation:.0%} (run.json health; try --workers)",
            )
        )
    if prompt_error_median is not None and prompt_error_median > t.max_prompt_error:
        flags.append(
            ValidityFlag(
                kind="unfaithful",
                reason=f"unfaithful: median |reported/requested prompt tokens - 1| is "
                f"{prompt_error_median:.1%} > {t.max_prompt_error:.0%}",
            )
        )
    for count in class_counts:
        short = [p for p in percentiles if count.requests < min_requests_for(p, t.tail_factor)]
        if short:
            worst = max(short)
            flags.append(
                ValidityFlag(
                    kind="too_small",
                    reason=f"too small: {', '.join(f'p{p:g}' for p in short)} of "
                    f"'{count.workload}' rest on {count.requests} requests "
                    f"(p{worst:g} needs >= {min_requests_for(worst, t.tail_factor)})",
                )
            )
    return RunValidity(flags=tuple(flags))
