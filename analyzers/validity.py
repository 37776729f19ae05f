"""Run validity: may these numbers be trusted as a measurement of the server?

Six flags, each with the reasons that raised it:

- ``client_bound``: the generator, not the server, limited the run, or its clock readings
  cannot be trusted: the p99 schedule lag (``sent - due``, from the rows; net of a
  ``--max-inflight`` cap's hold when there was one, from ``run.json`` health), the
  event-loop lag p99, the longest event-loop stall, the stamp delay p99 or its maximum
  (how long arrived bytes waited for the loop to stamp them: ``run.json`` health) exceeds
  its threshold. A stall delays every arrival stamped during it (a first token stamped
  late reads as a slow server), so one long stall is enough even when the p99 is low.
- ``backpressure``: a deliberate ``--max-inflight`` cap held requests back, so the offered
  load was not the trace's. A caveat, not an invalid measurement: ``valid`` stays True,
  ``gate`` evaluates the SLOs and prints the warning.
- ``stall``: an event-loop stall over ``max_listed_stall_ms`` (50 ms) is in ``run.json``'s
  stall log (``health.stalls``), named with its cause: the stamps taken during it were late
  by up to its length. A caveat (the run stays valid) until the stall passes
  ``max_loop_stall_ms``, where ``client_bound`` is raised as well.
- ``sim_slip``: the simulator wrote its chunks later than it planned (its own
  ``server_slip_ms``, per row), so its reported timings are not the deployment it models:
  the p99 slip exceeds ``max_sim_slip_p99_ms`` and ``max_sim_slip_share`` of the p50 TTFT.
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

from traces.health import Stall

FlagKind = Literal["client_bound", "unfaithful", "too_small", "backpressure", "sim_slip", "stall"]

CAVEATS: frozenset[FlagKind] = frozenset({"backpressure", "stall"})
"""Flags that qualify a run without making its measurement invalid."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidityThresholds:
    """Where a run stops being valid. Lags in ms, the prompt tolerance as a fraction."""

    max_schedule_lag_p99_ms: float = 5.0
    max_loop_lag_p99_ms: float = 20.0
    max_loop_stall_ms: float = 100.0
    """The longest event-loop lag (``health.loop_lag_ms.max_ms``): the most a stamp was late."""
    max_listed_stall_ms: float = 50.0
    """A stall in ``run.json``'s stall log longer than this raises the ``stall`` caveat."""
    max_cpu_utilisation: float = 0.7
    """A worker's CPU over wall time during the replay (1.0 = one core busy)."""
    max_stamp_delay_p99_ms: float = 20.0
    """p99 of how long arrived bytes waited for the event loop to stamp them."""
    max_stamp_delay_ms: float = 100.0
    """The longest such wait: a read stamped that late adds that much to a latency."""
    max_sim_slip_p99_ms: float = 5.0
    """p99 of the simulator's own lateness (``server_slip_ms``): beyond both this and
    ``max_sim_slip_share`` of the p50 TTFT, its truth is not the modelled deployment's."""
    max_sim_slip_share: float = 0.05
    max_prompt_error: float = 0.05
    tail_factor: float = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidityFlag:
    """One raised flag and the one-line reason."""

    kind: FlagKind
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CapHold:
    """What a ``--max-inflight`` cap did (``run.json`` health ``backpressure``)."""

    max_inflight: int
    held: int
    hold_p99_ms: float
    dispatch_lag_p99_ms: float
    """The schedule lag p99 net of the hold: the client's own lateness."""


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
    def backpressure(self) -> bool:
        """A ``--max-inflight`` cap held requests back (a caveat: the run stays valid)."""
        return self._has("backpressure")

    @property
    def stall(self) -> bool:
        """The stall log holds a stall over ``max_listed_stall_ms`` (a caveat)."""
        return self._has("stall")

    @property
    def sim_slip(self) -> bool:
        """The simulator wrote later than it planned: its reported truth is off."""
        return self._has("sim_slip")

    @property
    def valid(self) -> bool:
        """No flag raised but caveats (``backpressure``)."""
        return all(f.kind in CAVEATS for f in self.flags)

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
    stamp_delay_p99_ms: float | None = None,
    stamp_delay_max_ms: float | None = None,
    cap: CapHold | None = None,
    stalls: Sequence[Stall] = (),
    sim_slip_p99_ms: float | None = None,
    ttft_p50_ms: float | None = None,
    class_counts: Sequence[ClassCount],
    percentiles: Sequence[float],
    thresholds: ValidityThresholds = ValidityThresholds(),
) -> RunValidity:
    """Raise the flags the measurements call for (None inputs raise nothing). With a
    ``cap`` that held requests, the schedule lag judged is its ``dispatch_lag_p99_ms``
    (the rows' lag includes the deliberate hold)."""
    flags: list[ValidityFlag] = []
    t = thresholds
    if cap is not None and cap.held > 0:
        flags.append(
            ValidityFlag(
                kind="backpressure",
                reason=f"backpressure: {cap.held} requests waited for --max-inflight "
                f"{cap.max_inflight}; p99 wait {cap.hold_p99_ms:.1f} ms: the offered load was "
                "not the trace's",
            )
        )
        schedule_lag_p99_ms = cap.dispatch_lag_p99_ms
        late = "requests were sent late beyond the --max-inflight wait"
    else:
        late = "requests were sent late"
    if schedule_lag_p99_ms is not None and schedule_lag_p99_ms > t.max_schedule_lag_p99_ms:
        flags.append(
            ValidityFlag(
                kind="client_bound",
                reason=f"client-bound: schedule lag p99 {schedule_lag_p99_ms:.1f} ms > "
                f"{t.max_schedule_lag_p99_ms:g} ms ({late})",
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
    long = [st for st in stalls if st.duration_ms > t.max_listed_stall_ms]
    if long:
        longest = max(long, key=lambda st: st.duration_ms)
        causes = ", ".join(sorted({st.cause for st in long}))
        flags.append(
            ValidityFlag(
                kind="stall",
                reason=f"stall: {len(long)} event-loop stall(s) over "
                f"{t.max_listed_stall_ms:g} ms, the worst {longest.duration_ms:.0f} ms at "
                f"{longest.start_s:.1f} s (cause: {causes}; run.json health.stalls): stamps "
                "taken during them were late by up to that",
            )
        )
    if stamp_delay_p99_ms is not None and stamp_delay_p99_ms > t.max_stamp_delay_p99_ms:
        flags.append(
            ValidityFlag(
                kind="client_bound",
                reason=f"client-bound: stamp delay p99 {stamp_delay_p99_ms:.1f} ms > "
                f"{t.max_stamp_delay_p99_ms:g} ms (run.json health: arrived bytes waited for "
                "the event loop; latencies include client time)",
            )
        )
    elif stamp_delay_max_ms is not None and stamp_delay_max_ms > t.max_stamp_delay_ms:
        flags.append(
            ValidityFlag(
                kind="client_bound",
                reason=f"client-bound: bytes waited {stamp_delay_max_ms:.0f} ms > "
                f"{t.max_stamp_delay_ms:g} ms to be stamped (run.json health stamp delay): "
                "latencies read then were late by up to that",
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
    if sim_slip_p99_ms is not None and sim_slip_p99_ms > t.max_sim_slip_p99_ms:
        share = sim_slip_p99_ms / ttft_p50_ms if ttft_p50_ms else math.inf
        if share > t.max_sim_slip_share:
            of_ttft = f", {share:.0%} of the p50 TTFT" if ttft_p50_ms else ""
            flags.append(
                ValidityFlag(
                    kind="sim_slip",
                    reason=f"simulator slip: it wrote chunks p99 {sim_slip_p99_ms:.1f} ms "
                    f"later than planned (> {t.max_sim_slip_p99_ms:g} ms{of_ttft}): its "
                    "reported timings are not the modelled deployment's",
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
