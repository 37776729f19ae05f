"""Sweep analysis: latency, throughput and goodput against offered load; the knee; and,
for two sweeps of the same trace, the crossover.

A sweep directory holds ``sweep.json`` and one run directory per step (written by
``loadgen sweep``). ``analyze_sweep(path, options)`` analyses every step
(``metrics.analyze``) and checks the SLOs on each (``slo_eval.evaluate``):

- the **knee** is the highest offered load that still meets the SLOs, scanning up from
  the lowest load and stopping at the first step that breaks them (a later lucky step
  does not count);
- ``compare_sweeps(a, b)`` puts both goodput curves on one load axis (linear
  interpolation between steps) and finds the **crossover**: the load at which one
  deployment starts to beat the other on goodput by more than ``tie`` (a share of
  requests) *and* outside the interval of the lead (``verdict.goodput_lead``), for good,
  interpolated between the last load where it did not and the first where it did. The
  answer is one ``verdict.ComparisonVerdict``: withheld when any step of either sweep is
  invalid (a ``RunValidity`` flag; too few requests for an objective's percentile), or
  "within noise" when the lead at the top of the range is not significant.

Loads are offered mean rates (req/s) or concurrencies; a ``server_time_scale`` in
``sweep.json`` (a simulator run slower or faster than real time) converts loads and
latencies to the server's clock. Must not import loadgen or httpx.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from analyzers import exprs as e
from analyzers.compare.verdict import (
    ComparisonVerdict,
    Problem,
    goodput_lead,
    nothing,
    withheld,
    within_noise,
)
from analyzers.errors import AnalyzerError, DifferentTracesError, InvalidRunError
from analyzers.frames import RowSelection
from analyzers.goodput import SLOTargets
from analyzers.metrics import analyze
from analyzers.slo.evaluate import evaluate
from analyzers.slo.gate import analysis_options
from analyzers.slo.parse import SLOSet, scale_slos
from analyzers.validity import ClassCount, ValidityFlag, assess_validity

SWEEP_JSON: Final = "sweep.json"
DEFAULT_TIE: Final = 0.05


def is_sweep_dir(path: Path | str) -> bool:
    """Whether ``path`` is a sweep directory (has ``sweep.json``)."""
    return (Path(str(path)) / SWEEP_JSON).is_file()


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepOptions:
    """How to judge each step: SLOs (objectives and goodput targets), rows kept."""

    slos: SLOSet = field(default_factory=SLOSet)
    selection: RowSelection = field(default_factory=RowSelection)
    tie: float = DEFAULT_TIE


@dataclass(frozen=True, slots=True, kw_only=True)
class StepResult:
    """One step: offered and achieved load, latency percentiles, goodput, the SLO verdict.

    Latencies in ms on the server's clock; ``goodput`` is a fraction (None without SLO
    targets); ``meets_slo`` None when there are no objectives and no goodput targets.
    """

    index: int
    label: str
    run_dir: str
    offered: float
    achieved_rps: float
    output_tokens_per_s: float
    requests: int
    error_rate: float
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p99_ms: float | None
    e2e_p99_ms: float | None
    goodput: float | None
    goodput_rate: float | None
    meets_slo: bool | None
    failing: tuple[str, ...]
    validity: tuple[str, ...]
    """Every validity reason of the step's analysis (its tables' percentiles included)."""
    flags: tuple[ValidityFlag, ...] = ()
    """The flags a verdict on this step rests on: every flag but ``too_small``, which
    counts only for the percentiles the SLO objectives use (a goodput verdict's sample
    size is its interval's business)."""
    good: int | None = None
    """Requests that met the goodput targets (None without targets), of ``requests``."""

    @property
    def valid(self) -> bool:
        """No flag a verdict rests on."""
        return not self.flags


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepAnalysis:
    """A whole sweep: its steps in load order and the knee."""

    path: str
    label: str
    trace_sha256: str | None
    mode: str
    load_unit: str
    time_scale: float
    steps: tuple[StepResult, ...]
    knee: StepResult | None
    knee_note: str


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


def read_sweep_json(path: Path | str) -> dict[str, Any]:
    """The parsed ``sweep.json`` of a sweep directory."""
    file = Path(str(path)) / SWEEP_JSON
    try:
        doc = json.loads(file.read_text())
    except OSError as exc:
        raise InvalidRunError(f"{file}: cannot read ({exc.strerror})") from exc
    except json.JSONDecodeError as exc:
        raise InvalidRunError(f"{file}: not valid JSON ({exc})") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        raise InvalidRunError(f"{file}: not a sweep description (no steps)")
    return doc


def _step_result(
    sweep: Path, step: dict[str, Any], scale: float, slos: SLOSet, options: SweepOptions
) -> StepResult:
    run_dir = sweep / str(step["dir"])
    wall_slos = scale_slos(slos, scale)
    analysis = analyze(run_dir, analysis_options(wall_slos, options.selection))
    o = analysis.overall

    def pct(metric: str, p: float) -> float | None:
        value = o.metric(metric).value(p)
        return value / scale if value is not None else None

    results = evaluate(analysis, wall_slos)
    failing = tuple(r.objective.label for r in results if not r.passed)
    has_targets = wall_slos.goodput != SLOTargets()
    goodput = o.goodput.fraction if o.goodput is not None else None
    meets: bool | None = None
    if results:
        meets = not failing
    elif has_targets and goodput is not None:
        # Goodput targets alone: a step meets them when all but ``tie`` requests are good.
        meets = goodput >= 1 - options.tie
    offered = float(step["offered"])
    if step.get("concurrency") is None:
        offered *= scale
    # The flags a verdict rests on: too_small only for the objectives' own percentiles.
    counted = analysis.classes or (o,)
    sized = assess_validity(
        schedule_lag_p99_ms=None,
        loop_lag_p99_ms=None,
        prompt_error_median=None,
        class_counts=[ClassCount(workload=c.workload, requests=c.ok) for c in counted],
        percentiles=wall_slos.percentiles,
        thresholds=analysis.options.thresholds,
    )
    flags = (*(f for f in analysis.validity.flags if f.kind != "too_small"), *sized.flags)
    return StepResult(
        index=int(step["index"]),
        label=str(step.get("label", step["index"])),
        run_dir=str(run_dir),
        offered=offered,
        achieved_rps=o.requests_per_s * scale,
        output_tokens_per_s=o.output_tokens_per_s * scale,
        requests=o.requests,
        error_rate=o.error_rate,
        ttft_p50_ms=pct(e.TTFT_MS, 50.0),
        ttft_p99_ms=pct(e.TTFT_MS, 99.0),
        tpot_p50_ms=pct(e.TPOT_MS, 50.0),
        tpot_p99_ms=pct(e.TPOT_MS, 99.0),
        e2e_p99_ms=pct(e.E2E_MS, 99.0),
        goodput=goodput,
        goodput_rate=o.goodput.rate_per_s * scale if o.goodput is not None else None,
        meets_slo=meets,
        failing=failing,
        validity=analysis.validity.reasons,
        flags=flags,
        good=o.goodput.good if o.goodput is not None else None,
    )


def _knee(steps: Sequence[StepResult], label: str = "") -> tuple[StepResult | None, str]:
    """The knee and its note; withheld (None, ``no verdict: ...``) when a step it rests on
    (every step up to the first that breaks the SLO) is invalid."""
    if not steps or steps[0].meets_slo is None:
        return None, "no SLO given: no knee"
    knee = None
    for step in steps:
        if not step.valid:
            problem = Problem(side=label, step=step.label, flags=step.flags)
            return None, withheld([problem], "knee").text
        if not step.meets_slo:
            break
        knee = step
    if knee is None:
        return None, f"even the lowest load ({steps[0].label}) breaks the SLO"
    if knee is steps[-1]:
        return knee, "every step meets the SLO: the knee lies beyond the sweep"
    return knee, f"the SLO breaks at the next step ({steps[steps.index(knee) + 1].label})"


def analyze_sweep(
    path: Path | str, options: SweepOptions | None = None, *, label: str | None = None
) -> SweepAnalysis:
    """Analyse every step of a sweep (see the module docstring)."""
    options = options or SweepOptions()
    sweep = Path(str(path))
    doc = read_sweep_json(sweep)
    scale = float(doc.get("server_time_scale") or 1.0)
    steps = [s for s in doc["steps"] if (sweep / str(s.get("dir", ""))).is_dir()]
    if not steps:
        raise InvalidRunError(f"{sweep}: the sweep has no finished step")
    results = sorted(
        (_step_result(sweep, s, scale, options.slos, options) for s in steps),
        key=lambda r: r.offered,
    )
    name = label or str((doc.get("labels") or {}).get("name") or sweep.name)
    knee, note = _knee(results, name)
    trace = doc.get("trace") if isinstance(doc.get("trace"), dict) else {}
    assert isinstance(trace, dict)
    return SweepAnalysis(
        path=str(sweep),
        label=name,
        trace_sha256=trace.get("sha256") if isinstance(trace.get("sha256"), str) else None,
        mode=str(doc.get("mode", "rate")),
        load_unit=str(doc.get("load_unit", "req/s")),
        time_scale=scale,
        steps=tuple(results),
        knee=knee,
        knee_note=note,
    )


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
