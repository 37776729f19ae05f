"""Two sweeps of the same trace against each other: both goodput curves on one load axis
and the crossover, the load from which one deployment beats the other for good
(``compare_sweeps``; each sweep analysed by :mod:`analyzers.compare.sweep`), answered as
one ``verdict.ComparisonVerdict``.

Must not import loadgen or httpx.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from analyzers.compare.sweep import DEFAULT_TIE, SweepAnalysis, SweepOptions, analyze_sweep
from analyzers.compare.verdict import (
    ComparisonVerdict,
    Problem,
    goodput_lead,
    nothing,
    withheld,
    within_noise,
)
from analyzers.errors import AnalyzerError, DifferentTracesError


@dataclass(frozen=True, slots=True, kw_only=True)
class CurvePoint:
    """Both sweeps' goodput at one load (interpolated where a sweep has no step there)."""

    load: float
    a: float | None
    b: float | None
    a_requests: int = 0
    b_requests: int = 0
    """Requests behind each value (at an interpolated load, the smaller neighbour's)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Crossover:
    """Where one deployment starts to beat the other on goodput."""

    load: float
    winner: str
    loser: str
    description: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepComparison:
    """Two sweeps of the same trace: both analyses, the joint curve and the crossover."""

    a: SweepAnalysis
    b: SweepAnalysis
    points: tuple[CurvePoint, ...]
    crossover: Crossover | None
    """The declared crossover (None when there is none or it is withheld)."""
    verdicts: tuple[str, ...]
    verdict: ComparisonVerdict = field(default_factory=lambda: nothing("no crossover"))
    """The answer: crossover, winner over the whole range, or why there is none."""


def interpolate(points: Sequence[tuple[float, float]], x: float) -> float | None:
    """Linear interpolation of ``(x, y)`` points sorted by x; None outside their range."""
    if not points or x < points[0][0] or x > points[-1][0]:
        return None
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1] if x == points[-1][0] else None


def crossover(
    points: Sequence[CurvePoint],
    a_label: str,
    b_label: str,
    tie: float = DEFAULT_TIE,
    unit: str = "req/s",
) -> Crossover | None:
    """The load from which one curve beats the other by more than ``tie`` for good.

    Scans the joint curve from the highest load down while the same side leads by more
    than ``tie``; the crossover is interpolated where the lead reaches ``tie`` between the
    last point that did not show it and the first that did. None when neither leads at
    the highest load, or when the leader leads over the whole range.
    """
    joint = [(p.load, p.b - p.a) for p in points if p.a is not None and p.b is not None]
    if len(joint) < 2:
        return None
    last = joint[-1][1]
    if abs(last) <= tie:
        return None
    sign = 1 if last > 0 else -1
    i = len(joint) - 1
    while i > 0 and sign * joint[i - 1][1] > tie:
        i -= 1
    if i == 0:
        return None
    (x0, d0), (x1, d1) = joint[i - 1], joint[i]
    s0, s1 = sign * d0, sign * d1
    x = x0 + (tie - s0) / (s1 - s0) * (x1 - x0) if s1 != s0 else x1
    winner, loser = (b_label, a_label) if sign > 0 else (a_label, b_label)
    return Crossover(
        load=x,
        winner=winner,
        loser=loser,
        description=(
            f"{winner} beats {loser} on goodput from {x:.3g} {unit} (by more than {tie:.0%} of "
            f"requests; interpolated between {x0:.3g} and {x1:.3g})"
        ),
    )


def compare_sweeps(
    a: Path | str,
    b: Path | str,
    options: SweepOptions | None = None,
    *,
    labels: tuple[str, str] | None = None,
    allow_different_traces: bool = False,
) -> SweepComparison:
    """Both sweeps analysed, their goodput curves on one axis, and the crossover."""
    options = options or SweepOptions()
    sa = analyze_sweep(a, options, label=labels[0] if labels else None)
    sb = analyze_sweep(b, options, label=labels[1] if labels else None)
    if sa.label == sb.label:
        sb = _relabel(sb, f"{sb.label} (B)")
    if (
        sa.trace_sha256 is not None
        and sb.trace_sha256 is not None
        and sa.trace_sha256 != sb.trace_sha256
        and not allow_different_traces
    ):
        raise DifferentTracesError(
            f"the sweeps replayed different traces ({sa.path}: {sa.trace_sha256[:12]}, "
            f"{sb.path}: {sb.trace_sha256[:12]}); pass --allow-different-traces to compare"
        )
    if (sa.mode == "concurrency") != (sb.mode == "concurrency"):
        raise AnalyzerError("one sweep is closed loop (concurrency), the other open loop")
    ya = [(s.offered, s.goodput) for s in sa.steps if s.goodput is not None]
    yb = [(s.offered, s.goodput) for s in sb.steps if s.goodput is not None]
    loads = sorted({x for x, _ in ya} | {x for x, _ in yb})
    points = tuple(
        CurvePoint(
            load=x,
            a=interpolate(ya, x),
            b=interpolate(yb, x),
            a_requests=_requests_at(sa, x),
            b_requests=_requests_at(sb, x),
        )
        for x in loads
    )
    cross, verdict = sweep_verdict(sa, sb, points, options.tie)
    verdicts = []
    unit = sa.load_unit
    for s in (sa, sb):
        if s.knee is not None:
            verdicts.append(f"{s.label}: knee at {s.knee.offered:.3g} {unit} ({s.knee_note})")
        else:
            verdicts.append(f"{s.label}: no knee ({s.knee_note})")
    verdicts.append(verdict.text)
    return SweepComparison(
        a=sa,
        b=sb,
        points=points,
        crossover=cross,
        verdicts=tuple(verdicts),
        verdict=verdict,
    )


def _requests_at(s: SweepAnalysis, load: float) -> int:
    """Requests behind a sweep's goodput at ``load``: its step there, else the smaller of
    the two steps the value is interpolated between (0 outside the sweep)."""
    steps = [st for st in s.steps if st.goodput is not None]
    for st in steps:
        if st.offered == load:
            return st.requests
    for lo, hi in itertools.pairwise(steps):
        if lo.offered < load < hi.offered:
            return min(lo.requests, hi.requests)
    return 0


def _lead(p: CurvePoint) -> tuple[float, float, float]:
    """B's goodput lead over A at a point: (estimate, low, high) of its interval."""
    assert p.a is not None
    assert p.b is not None
    na, nb = p.a_requests, p.b_requests
    if not na or not nb:
        return (p.b - p.a, p.b - p.a, p.b - p.a)
    iv = goodput_lead(round(p.a * na), na, round(p.b * nb), nb)
    return (iv.estimate, iv.low, iv.high)


def sweep_verdict(
    a: SweepAnalysis, b: SweepAnalysis, points: Sequence[CurvePoint], tie: float = DEFAULT_TIE
) -> tuple[Crossover | None, ComparisonVerdict]:
    """The crossover of two goodput curves, or why none is declared.

    Withheld when any step of either sweep is invalid (the curve, and so the crossover,
    rests on every step). Otherwise the curves are scanned from the highest load down
    while the same side leads by more than ``tie`` with an interval that excludes 0; the
    crossover is interpolated (where the lead reaches ``tie``) between the last load where
    that did not hold and the first where it did. A lead at the highest load that is
    larger than ``tie`` but not significant is "within noise"; a significant lead over the
    whole range names a winner without a crossover.
    """
    unit = a.load_unit
    joint = [p for p in points if p.a is not None and p.b is not None]
    if not joint:
        return None, nothing("no crossover: give goodput targets (SLO) to compare goodput")
    problems = [
        Problem(side=s.label, step=st.label, flags=st.flags)
        for s in (a, b)
        for st in s.steps
        if st.flags
    ]
    if problems:
        return None, withheld(problems, "crossover")
    leads = [_lead(p) for p in joint]

    def leading(i: int, sign: int) -> bool:
        est, lo, hi = leads[i]
        return sign * est > tie and (lo > 0 if sign > 0 else hi < 0)

    top_est, top_lo, top_hi = leads[-1]
    sign = 1 if top_est > 0 else -1
    top = joint[-1]
    if not leading(len(joint) - 1, sign):
        if abs(top_est) > tie:
            lead_side = b.label if sign > 0 else a.label
            low, high = sorted((sign * top_lo, sign * top_hi))
            return None, within_noise(
                f"at {top.load:.3g} {unit} {lead_side} leads by {abs(top_est) * 100:.1f} pts of "
                f"goodput, 95% interval [{low * 100:+.1f}, {high * 100:+.1f}] includes 0",
                "crossover",
            )
        return None, nothing(
            f"no crossover within the swept loads: neither leads by more than {tie:.0%} of "
            f"requests at {top.load:.3g} {unit}"
        )
    winner, loser = (b.label, a.label) if sign > 0 else (a.label, b.label)
    i = len(joint) - 1
    while i > 0 and leading(i - 1, sign):
        i -= 1
    lo, hi = sorted((sign * leads[i][1], sign * leads[i][2]))
    lead_text = (
        f"lead at {joint[i].load:.3g}: {sign * leads[i][0] * 100:+.1f} pts [{lo * 100:+.1f}, "
        f"{hi * 100:+.1f}]"
    )
    if i == 0:
        text = (
            f"winner: {winner} beats {loser} on goodput at every swept load "
            f"({joint[0].load:.3g}-{top.load:.3g} {unit}; {lead_text})"
        )
        return None, ComparisonVerdict(kind="winner", text=text, winner=winner, loser=loser)
    (x0, p0), (x1, p1) = (joint[i - 1].load, leads[i - 1][0]), (joint[i].load, leads[i][0])
    s0, s1 = sign * p0, sign * p1
    x = x0 + (tie - s0) / (s1 - s0) * (x1 - x0) if s1 != s0 else x1
    x = min(max(x, x0), x1)
    description = (
        f"{winner} beats {loser} on goodput from {x:.3g} {unit} (between the steps at "
        f"{x0:.3g} and {x1:.3g}; {lead_text}; by more than {tie:.0%} of requests)"
    )
    cross = Crossover(load=x, winner=winner, loser=loser, description=description)
    return cross, ComparisonVerdict(
        kind="crossover",
        text=f"crossover: {description}",
        winner=winner,
        loser=loser,
        load=x,
    )


def _relabel(s: SweepAnalysis, label: str) -> SweepAnalysis:
    return SweepAnalysis(
        path=s.path,
        label=label,
        trace_sha256=s.trace_sha256,
        mode=s.mode,
        load_unit=s.load_unit,
        time_scale=s.time_scale,
        steps=s.steps,
        knee=s.knee,
        knee_note=s.knee_note,
    )
