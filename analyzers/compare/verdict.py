"""The verdict of a comparison: a winner or a crossover, or why there is none.

A comparison's answer is one ``ComparisonVerdict``, built once here and rendered as is by
every report (console, Markdown, JSON, HTML), so that they cannot disagree. It is
**withheld** (``withheld_reason`` set, ``text`` starting ``no verdict:``) when

- a run or sweep step it rests on is invalid: any ``RunValidity`` flag (client-bound,
  unfaithful prompts, too few samples for the percentile used, and whatever flags
  ``analyzers.validity`` adds later), named with the step and the flag; or
- the difference it rests on lies within noise: the bootstrap interval of the goodput
  lead includes 0 (``goodput_lead``), whatever the point estimate says.

Pure values and arithmetic: must not import loadgen, reports, httpx or polars.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from analyzers.compare.bootstrap import DEFAULT_CONFIDENCE, Interval
from analyzers.validity import ValidityFlag

VerdictKind = Literal["crossover", "winner", "none", "invalid", "noise", "unconfirmed"]
"""``crossover``/``winner``: declared; ``none``: nothing to declare (no lead anywhere);
``invalid``: withheld, a step or run it rests on is invalid; ``noise``: withheld, the
lead lies within the bootstrap interval; ``unconfirmed``: withheld, a measured check of an
offline verdict disagrees with it (:mod:`analyzers.compare.confirm`)."""

NO_VERDICT: Final = "no verdict"


@dataclass(frozen=True, slots=True, kw_only=True)
class ComparisonVerdict:
    """One comparison's answer. ``text`` is the line every report prints verbatim;
    ``withheld_reason`` says why no winner or crossover is declared (None: declared, or
    ``kind == "none"``)."""

    kind: VerdictKind
    text: str
    winner: str | None = None
    loser: str | None = None
    load: float | None = None
    withheld_reason: str | None = None

    @property
    def withheld(self) -> bool:
        """A winner or crossover may exist but is not declared (invalid step, noise, or an
        offline verdict its measured checks did not confirm)."""
        return self.withheld_reason is not None

    @property
    def declared(self) -> bool:
        """A winner or crossover is declared."""
        return self.kind in ("crossover", "winner")


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """An invalid input of a verdict: which side, which step, which flags."""

    side: str
    step: str
    flags: tuple[ValidityFlag, ...]

    @property
    def line(self) -> str:
        """``monolith at 5/s: client-bound: schedule lag p99 9.4 ms > 5 ms (...)``: the
        first flag's reason, prefixed with its kind unless the reason names it already."""
        where = f"{self.side} at {self.step}" if self.step else self.side
        first = self.flags[0]
        names = (first.kind, first.kind.replace("_", "-"), first.kind.replace("_", " "))
        reason = first.reason if first.reason.startswith(names) else f"{first.kind}: {first.reason}"
        more = {f.kind for f in self.flags[1:]} - {first.kind}
        also = f" (also {', '.join(sorted(more))})" if more else ""
        return f"{where}: {reason}{also}"


def withheld(problems: Sequence[Problem], what: str = "winner") -> ComparisonVerdict:
    """The verdict withheld because of invalid steps: one line naming the first problem
    (and how many more)."""
    first = problems[0]
    more = f"; {len(problems) - 1} more invalid" if len(problems) > 1 else ""
    reason = f"{first.line}{more}"
    return ComparisonVerdict(
        kind="invalid",
        text=f"{NO_VERDICT}: {what} withheld, {reason}",
        withheld_reason=reason,
    )


def within_noise(reason: str, what: str = "winner") -> ComparisonVerdict:
    """The verdict withheld because the lead lies within noise."""
    return ComparisonVerdict(
        kind="noise",
        text=f"{NO_VERDICT}: {what} within noise ({reason})",
        withheld_reason=f"within noise ({reason})",
    )


def nothing(text: str) -> ComparisonVerdict:
    """Nothing to declare (no lead anywhere, no goodput targets)."""
    return ComparisonVerdict(kind="none", text=text)


def _z(confidence: float) -> float:
    """The two-sided normal quantile of ``confidence`` (bisection on ``erf``)."""
    lo, hi = 0.0, 10.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if math.erf(mid / math.sqrt(2)) < confidence:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def goodput_lead(
    a_good: int,
    a_total: int,
    b_good: int,
    b_total: int,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Interval:
    """B's goodput minus A's with a ``confidence`` interval (Agresti-Caffo: one success and
    one failure added to each side, so that 40 of 40 still carries its uncertainty; the
    plain bootstrap of a proportion of 0 or 1 has none).

    ``estimate`` is the observed difference."""
    if a_total <= 0 or b_total <= 0:
        return Interval(estimate=0.0, low=-1.0, high=1.0, confidence=confidence)
    pa, pb = (a_good + 1) / (a_total + 2), (b_good + 1) / (b_total + 2)
    se = math.sqrt(pa * (1 - pa) / (a_total + 2) + pb * (1 - pb) / (b_total + 2))
    centre = pb - pa
    z = _z(confidence)
    return Interval(
        estimate=b_good / b_total - a_good / a_total,
        low=max(-1.0, centre - z * se),
        high=min(1.0, centre + z * se),
        confidence=confidence,
    )
