"""Sweep analysis: latency, throughput and goodput against offered load; and the knee (two
sweeps of the same trace against each other, their crossover, are
:mod:`analyzers.compare.crossover`'s).

A sweep directory holds ``sweep.json`` and one run directory per step (written by
``loadgen sweep``). ``analyze_sweep(path, options)`` analyses every step
(``metrics.analyze``) and checks the SLOs on each (``slo_eval.evaluate``):

- the **knee** is the highest offered load that still meets the SLOs, scanning up from
  the lowest load and stopping at the first step that breaks them (a later lucky step
  does not count);
- ``crossover.compare_sweeps(a, b)`` puts both goodput curves on one load axis (linear
  interpolation between steps) and finds the **crossover**: the load at which one
  deployment starts to beat the other on goodput by more than ``tie`` (a share of
  requests) *and* outside the interval of the lead (``verdict.goodput_lead``), for good,
  interpolated between the last load where it did not and the first where it did. The
  answer is one ``verdict.ComparisonVerdict``: withheld when any step of either sweep is
  invalid (a ``RunValidity`` flag; too few requests for an objective's percentile), or
  "within noise" when the lead at the top of the range is not significant.

Loads are offered mean rates (req/s) or concurrencies; a ``server_time_scale`` in
``sweep.json`` (a simulator run slower or faster than real time), or else the time scale
the first step's ``run.json`` deployment recorded, converts loads and latencies to the
server's clock. Must not import loadgen or httpx.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from analyzers import exprs as e
from analyzers.compare.verdict import (
    Problem,
    withheld,
)
from analyzers.errors import InvalidRunError
from analyzers.frames import RowSelection, recorded_time_scale
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


def sweep_time_scale(sweep: Path, doc: dict[str, Any], steps: Sequence[dict[str, Any]]) -> float:
    """The server's time scale: ``sweep.json``'s ``server_time_scale`` when it names one,
    else what the first step's ``run.json`` deployment recorded, else 1."""
    given = doc.get("server_time_scale")
    if isinstance(given, int | float) and given > 0:
        return float(given)
    recorded = recorded_time_scale(sweep / str(steps[0]["dir"]))
    return recorded.time_scale if recorded is not None else 1.0


def analyze_sweep(
    path: Path | str, options: SweepOptions | None = None, *, label: str | None = None
) -> SweepAnalysis:
    """Analyse every step of a sweep (see the module docstring)."""
    options = options or SweepOptions()
    sweep = Path(str(path))
    doc = read_sweep_json(sweep)
    steps = [s for s in doc["steps"] if (sweep / str(s.get("dir", ""))).is_dir()]
    if not steps:
        raise InvalidRunError(f"{sweep}: the sweep has no finished step")
    scale = sweep_time_scale(sweep, doc, steps)
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
