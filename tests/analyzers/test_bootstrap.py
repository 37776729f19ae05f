"""The order-statistic bootstrap: exact percentiles, the brute-force distribution, speed."""

from __future__ import annotations

import random
import statistics

import pytest

from analyzers.compare.bootstrap import (
    Sample,
    _replicates,
    percentile_difference,
    percentile_interval,
    percentile_of,
    proportion_difference,
)
from analyzers.errors import AnalyzerError


@pytest.mark.parametrize("p", [0.0, 12.5, 50.0, 90.0, 99.0, 100.0])
def test_percentile_matches_linear_interpolation(p: float) -> None:
    xs = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0]
    ordered = sorted(xs)
    h = (len(xs) - 1) * p / 100
    lo = int(h)
    hi = min(lo + 1, len(xs) - 1)
    expected = ordered[lo] + (h - lo) * (ordered[hi] - ordered[lo])
    assert percentile_of(Sample.of(xs), p) == pytest.approx(expected)


def test_weighted_sample_equals_expanded_sample() -> None:
    values, weights = [3.0, 1.0, 2.0], [2, 1, 3]
    expanded = [3.0, 3.0, 1.0, 2.0, 2.0, 2.0]
    for p in (10.0, 50.0, 75.0, 99.0):
        weighted = percentile_of(Sample.of(values, weights), p)
        assert weighted == pytest.approx(percentile_of(Sample.of(expanded), p))


@pytest.mark.parametrize("p", [50.0, 99.0])
def test_replicates_match_brute_force_resampling(p: float) -> None:
    rng = random.Random(1)
    xs = [rng.expovariate(1 / 100) for _ in range(300)]
    fast = _replicates(Sample.of(xs), p, 3000, random.Random(2))
    r = random.Random(3)
    brute = [percentile_of(Sample.of([r.choice(xs) for _ in xs]), p) for _ in range(1500)]
    assert statistics.mean(fast) == pytest.approx(statistics.mean(brute), rel=0.03)
    assert statistics.stdev(fast) == pytest.approx(statistics.stdev(brute), rel=0.15)


def test_seeded() -> None:
    rng = random.Random(0)
    a = Sample.of([rng.gauss(100, 10) for _ in range(10_000)])
    b = Sample.of([rng.gauss(110, 10) for _ in range(10_000)])
    d1 = percentile_difference(a, b, 99.0, resamples=1000, seed=5)
    d2 = percentile_difference(a, b, 99.0, resamples=1000, seed=5)
    assert d1 == d2
    assert d1.significant
    assert d1.absolute.low < d1.absolute.estimate < d1.absolute.high
    assert d1.relative is not None
    assert d1.relative.low > 0


def test_interval_covers_known_shift() -> None:
    rng = random.Random(4)
    base = [rng.lognormvariate(4, 0.4) for _ in range(2000)]
    shifted = [v + 25.0 for v in (rng.lognormvariate(4, 0.4) for _ in range(2000))]
    d = percentile_difference(Sample.of(base), Sample.of(shifted), 50.0, seed=1)
    assert d.absolute.low <= 25.0 <= d.absolute.high


def test_same_distribution_is_not_significant_mostly() -> None:
    hits = 0
    for seed in range(20):
        rng = random.Random(seed)
        a = Sample.of([rng.gauss(50, 5) for _ in range(500)])
        b = Sample.of([rng.gauss(50, 5) for _ in range(500)])
        hits += percentile_difference(a, b, 90.0, seed=seed).significant
    assert hits <= 3


def test_proportion_difference() -> None:
    d = proportion_difference(950, 1000, 800, 1000, seed=1)
    assert d.absolute.estimate == pytest.approx(-0.15)
    assert d.absolute.high < 0
    same = proportion_difference(1000, 1000, 1000, 1000)
    assert same.absolute.low == same.absolute.high == 0


def test_errors() -> None:
    with pytest.raises(AnalyzerError):
        percentile_difference(Sample.of([]), Sample.of([1.0]), 50.0)
    with pytest.raises(AnalyzerError):
        percentile_interval(Sample.of([1.0]), 50.0, resamples=5)
    with pytest.raises(AnalyzerError):
        percentile_interval(Sample.of([1.0]), 50.0, confidence=1.5)
