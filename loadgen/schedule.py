"""Pure scheduling: trace arrival times to due offsets in nanoseconds.

Open-loop replay sends request i at ``t0 + offset_ns[i]``; the offsets are absolute from
one start time, so lateness never accumulates. Nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from loadgen.errors import ConfigError


def mean_rate(arrivals_s: Sequence[float]) -> float | None:
    """Requests per second over the trace's span ((n - 1) / (last - first)); None if undefined."""
    if len(arrivals_s) < 2:
        return None
    span = arrivals_s[-1] - arrivals_s[0]
    return (len(arrivals_s) - 1) / span if span > 0 else None


def time_factor(
    arrivals_s: Sequence[float], *, time_scale: float | None = None, rate: float | None = None
) -> float:
    """The factor applied to every inter-arrival gap.

    ``time_scale`` multiplies the trace's own timestamps (0.5 replays twice as fast);
    ``rate`` picks the factor that makes the mean rate equal to it, keeping the burstiness
    (the shape of the gaps). At most one may be given; neither means 1.
    """
    if time_scale is not None and rate is not None:
        raise ConfigError("give either --time-scale or --rate, not both")
    if time_scale is not None:
        if time_scale < 0:
            raise ConfigError(f"--time-scale must be >= 0, got {time_scale}")
        return time_scale
    if rate is not None:
        if rate <= 0:
            raise ConfigError(f"--rate must be > 0, got {rate}")
        current = mean_rate(arrivals_s)
        if current is None:
            raise ConfigError("--rate needs a trace with at least two distinct arrival times")
        return current / rate
    return 1.0


MAX_SPAN_S: Final = 1e9
"""Longest a replay's schedule may span, in seconds (about 31.7 years): a due time is the
run's start plus its offset in epoch nanoseconds, which an int64 holds until 2262."""


def check_span(arrivals_s: Sequence[float], factor: float) -> None:
    """Refuse a schedule whose last request would be due beyond ``MAX_SPAN_S`` (the trace's
    span times ``factor``): the run would fail when it computes its due times."""
    if len(arrivals_s) < 2:
        return
    span = (arrivals_s[-1] - arrivals_s[0]) * factor
    if not span <= MAX_SPAN_S:
        raise ConfigError(
            f"the trace spans {arrivals_s[-1] - arrivals_s[0]:g} s, {span:g} s at a time "
            f"factor of {factor:g}: more than the {MAX_SPAN_S:.0e} s a run can schedule"
        )


def due_offsets_ns(
    arrivals_s: Sequence[float], factor: float, origin_s: float | None = None
) -> list[int]:
    """Offsets from the run start at which each request is due, in ns.

    Offsets count from ``origin_s``, by default the first arrival: a trace sliced from the
    middle of a day does not wait for its own start time. A shard passes the whole trace's
    first arrival so that all shards share one time axis.
    """
    if not arrivals_s:
        return []
    first = arrivals_s[0] if origin_s is None else origin_s
    scale = factor * 1e9
    return [round((a - first) * scale) for a in arrivals_s]
