"""Pure scheduling arithmetic."""

from __future__ import annotations

import pytest

from loadgen.errors import ConfigError
from loadgen.schedule import MAX_SPAN_S, check_span, due_offsets_ns, mean_rate, time_factor


def test_offsets_start_at_zero_and_scale() -> None:
    assert due_offsets_ns([10.0, 10.5, 12.0], 1.0) == [0, 500_000_000, 2_000_000_000]
    assert due_offsets_ns([10.0, 10.5, 12.0], 0.5) == [0, 250_000_000, 1_000_000_000]


def test_rate_factor_keeps_shape() -> None:
    arrivals = [0.0, 1.0, 1.5, 4.0]  # 3 gaps over 4 s: 0.75 req/s
    assert mean_rate(arrivals) == pytest.approx(0.75)
    factor = time_factor(arrivals, rate=3.0)
    offsets = due_offsets_ns(arrivals, factor)
    assert offsets == [0, 250_000_000, 375_000_000, 1_000_000_000]


def test_conflicting_or_bad_options() -> None:
    with pytest.raises(ConfigError, match="not both"):
        time_factor([0.0, 1.0], rate=1.0, time_scale=1.0)
    with pytest.raises(ConfigError, match="two distinct"):
        time_factor([0.0, 0.0], rate=1.0)
    assert time_factor([0.0, 1.0]) == 1.0


def test_a_schedule_beyond_the_clock_is_refused_before_the_run() -> None:
    """A span times the time factor beyond MAX_SPAN_S would overflow the due times (a
    float overflow midway through the run, before this check)."""
    check_span([0.0, MAX_SPAN_S], 1.0)
    check_span([0.0], 1e300)
    with pytest.raises(ConfigError, match="more than the 1e\\+09 s"):
        check_span([0.0, 10.0], 1e300)
    with pytest.raises(ConfigError):
        check_span([0.0, MAX_SPAN_S], 2.0)
