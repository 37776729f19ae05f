"""A crossover found on the offline engine and confirmed by checks over HTTP.

The offline engine (``loadgen simulate``) is exact and cheap: the goodput curves of two
deployments swept on it give the crossover to any resolution (``offline_verdict`` on the
joint curve; the caller may bisect on the load with ``leads``). Measured runs are noisy
and, on a busy machine, often invalid; so the verdict rests on the offline crossover and
uses measured load points, one below and one above it, only to check it (``confirm``):
each side's run must be valid, and at each point the winner must lead by more than ``tie``
over HTTP exactly where it does offline (above the crossover: yes; below it: no). A check
that is invalid or disagrees withholds the verdict with the reason; it never moves the
crossover.

Pure values and arithmetic: must not import loadgen, reports, httpx or polars.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from analyzers.compare.crossover import CurvePoint, crossover
from analyzers.compare.sweep import DEFAULT_TIE, StepResult
from analyzers.compare.verdict import NO_VERDICT, ComparisonVerdict, Problem, nothing, withheld


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckPoint:
    """One load point run both ways: offline and over HTTP, each for sides A and B
    (named by ``labels``)."""

    load: float
    labels: tuple[str, str]
    offline: tuple[StepResult, StepResult]
    http: tuple[StepResult, StepResult]

    def lead(self, *, http: bool) -> float | None:
        """B's goodput minus A's (a fraction of requests), offline or over HTTP."""
        a, b = self.http if http else self.offline
        if a.goodput is None or b.goodput is None:
            return None
        return b.goodput - a.goodput


def leads(a_goodput: float, b_goodput: float, winner_is_b: bool, tie: float = DEFAULT_TIE) -> bool:
    """Whether the winner leads by more than ``tie`` (the predicate a bisection uses)."""
    lead = b_goodput - a_goodput
    return (lead if winner_is_b else -lead) > tie


def offline_verdict(
    points: Sequence[CurvePoint],
    a_label: str,
    b_label: str,
    *,
    tie: float = DEFAULT_TIE,
    unit: str = "req/s",
) -> ComparisonVerdict:
    """The verdict of two exact (offline) goodput curves: the crossover from which one
    leads by more than ``tie`` for good, a winner over the whole range, or nothing. No
    interval: the curves carry no measurement noise."""
    joint = [p for p in points if p.a is not None and p.b is not None]
    if not joint:
        return nothing("no crossover: give goodput targets (SLO) to compare goodput")
    cross = crossover(joint, a_label, b_label, tie, unit)
    if cross is not None:
        return ComparisonVerdict(
            kind="crossover",
            text=f"crossover: {cross.description}",
            winner=cross.winner,
            loser=cross.loser,
            load=cross.load,
        )
    top = joint[-1]
    assert top.a is not None
    assert top.b is not None
    if abs(top.b - top.a) > tie:
        winner, loser = (b_label, a_label) if top.b > top.a else (a_label, b_label)
        return ComparisonVerdict(
            kind="winner",
            text=(
                f"winner: {winner} beats {loser} on goodput at every load "
                f"({joint[0].load:.3g}-{top.load:.3g} {unit}, by more than {tie:.0%})"
            ),
            winner=winner,
            loser=loser,
        )
    return nothing(
        f"no crossover within the loads: neither leads by more than {tie:.0%} of requests "
        f"at {top.load:.3g} {unit}"
    )


def _pts(lead: float | None, sign: int) -> str:
    return "n/a" if lead is None else f"{sign * lead * 100:+.1f} pts"


def confirm(
    offline: ComparisonVerdict,
    checks: Sequence[CheckPoint],
    *,
    tie: float = DEFAULT_TIE,
    unit: str = "req/s",
) -> ComparisonVerdict:
    """The offline verdict, confirmed by ``checks`` (see the module doc); withheld when a
    check's run is invalid or its lead disagrees. Verdicts without a winner pass as is."""
    if not offline.declared or offline.winner is None or not checks:
        return offline
    problems = [
        Problem(side=side, step=f"{c.load:.3g} {unit} (HTTP check)", flags=step.flags)
        for c in checks
        for side, step in zip(c.labels, c.http, strict=True)
        if step.flags
    ]
    if problems:
        return withheld(problems, offline.kind)
    sign = 1 if checks[0].labels[1] == offline.winner else -1
    seen = []
    for c in sorted(checks, key=lambda c: c.load):
        lead, exact = c.lead(http=True), c.lead(http=False)
        expected = exact is not None and sign * exact > tie
        if lead is None or (sign * lead > tie) != expected:
            reason = (
                f"the HTTP check at {c.load:.3g} {unit} disagrees with the offline engine: "
                f"{offline.winner} leads by {_pts(lead, sign)} over HTTP, {_pts(exact, sign)} "
                f"offline (by {'more' if expected else 'no more'} than {tie * 100:.0f} pts "
                "expected)"
            )
            return ComparisonVerdict(
                kind="unconfirmed",
                text=f"{NO_VERDICT}: {offline.kind} withheld, {reason}",
                withheld_reason=reason,
            )
        seen.append(f"{c.load:.3g} ({_pts(lead, sign)})")
    return ComparisonVerdict(
        kind=offline.kind,
        text=f"{offline.text}; confirmed over HTTP at {' and '.join(seen)} {unit}",
        winner=offline.winner,
        loser=offline.loser,
        load=offline.load,
    )


def bisected(
    offline: ComparisonVerdict,
    low: float,
    high: float,
    *,
    tie: float = DEFAULT_TIE,
    unit: str = "req/s",
) -> ComparisonVerdict:
    """The offline crossover narrowed by a bisection to the loads ``low`` (the winner does
    not lead by more than ``tie``) and ``high`` (it does): the crossover is ``high``."""
    if offline.kind != "crossover" or offline.winner is None:
        return offline
    return ComparisonVerdict(
        kind="crossover",
        text=(
            f"crossover: {offline.winner} beats {offline.loser} on goodput from {high:.3g} "
            f"{unit} (offline engine, bisected to {low:.3g}-{high:.3g}; by more than "
            f"{tie:.0%} of requests)"
        ),
        winner=offline.winner,
        loser=offline.loser,
        load=high,
    )
