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
  requests), interpolated between the last load where it did not and the first where it
  did.

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
from analyzers.errors import AnalyzerError, DifferentTracesError, InvalidRunError
from analyzers.frames import RowSelection
from analyzers.goodput import SLOTargets
from analyzers.metrics import analyze
from analyzers.slo.evaluate import evaluate
from analyzers.slo.gate import analysis_options
from analyzers.slo.parse import SLOSet, scale_slos

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
    verdicts: tuple[str, ...]


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
    )


def _knee(steps: Sequence[StepResult]) -> tuple[StepResult | None, str]:
    if not steps or steps[0].meets_slo is None:
        return None, "no SLO given: no knee"
    knee = None
    for step in steps:
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
    knee, note = _knee(results)
    trace = doc.get("trace") if isinstance(doc.get("trace"), dict) else {}
    assert isinstance(trace, dict)
    return SweepAnalysis(
        path=str(sweep),
        label=label or str((doc.get("labels") or {}).get("name") or sweep.name),
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
    curve_a = [(s.offered, s.goodput) for s in sa.steps if s.goodput is not None]
    curve_b = [(s.offered, s.goodput) for s in sb.steps if s.goodput is not None]
    ya = [(x, y) for x, y in curve_a if y is not None]
    yb = [(x, y) for x, y in curve_b if y is not None]
    loads = sorted({x for x, _ in ya} | {x for x, _ in yb})
    points = tuple(CurvePoint(load=x, a=interpolate(ya, x), b=interpolate(yb, x)) for x in loads)
    cross = crossover(points, sa.label, sb.label, options.tie, sa.load_unit)
    verdicts = []
    unit = sa.load_unit
    for s in (sa, sb):
        if s.knee is not None:
            verdicts.append(f"{s.label}: knee at {s.knee.offered:.3g} {unit} ({s.knee_note})")
        else:
            verdicts.append(f"{s.label}: no knee ({s.knee_note})")
    if cross is not None:
        verdicts.append(f"crossover: {cross.description}")
    elif not ya or not yb:
        verdicts.append("no crossover: give goodput targets (SLO) to compare goodput")
    else:
        verdicts.append("no crossover within the swept loads")
    return SweepComparison(a=sa, b=sb, points=points, crossover=cross, verdicts=tuple(verdicts))


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
