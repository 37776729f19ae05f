"""The gate: judge one run against SLOs (and optionally a baseline run) for CI.

``gate(run, options)`` returns a ``GateReport``: every objective checked
(``analyzers.slo.parse``), every regression check against a baseline, the validity problems,
and one verdict with its exit code:

====  ==============  ==========================================================
exit  verdict         when
====  ==============  ==========================================================
0     pass            every objective holds, no significant regression
1     breach          an objective fails (or has no data), or a regression
3     invalid         the run (or baseline) misses a ``[validity]`` requirement
                      (client-bound, simulator slip, unfaithful, too few requests)
4     infrastructure  most requests failed to reach the server: connect errors,
                      timeouts, 502/503/504 (``infra_share``), or none was ok
====  ==============  ==========================================================

The most fundamental failure wins: 4 over 3 over 1, because a broken endpoint makes the
latency numbers meaningless and an invalid run makes them untrustworthy.

A ``--max-inflight`` cap that held requests back (``backpressure``) is not a problem: the
SLOs are evaluated as usual and the caveat is carried in ``warnings`` (printed with the
verdict), since the user chose the cap; the offered load was not the trace's.

Regression against a baseline: for each checked (class, metric, percentile), the run fails
only when it is worse than the baseline by more than ``max_regression`` (relative) AND the
bootstrap interval of the difference excludes zero on the worse side, so two runs of the
same deployment do not fail on noise. Must not import loadgen or httpx.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

import polars as pl

from analyzers import exprs as e
from analyzers.analysis import DEFAULT_PERCENTILES, Analysis, AnalysisOptions
from analyzers.cache import CacheOptions
from analyzers.compare.bootstrap import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    Difference,
    percentile_difference,
    proportion_difference,
)
from analyzers.compare.identity import check_same_trace
from analyzers.compare.samples import RunSamples, run_samples
from analyzers.errors import AnalyzerError, InfrastructureError, InvalidRunError, SLOBreach
from analyzers.frames import RowSelection, scan_run, select_rows
from analyzers.metrics import analyze
from analyzers.slo.evaluate import ObjectiveResult, class_of, evaluate, validity_problems
from analyzers.slo.parse import LATENCY_METRICS, SLOSet
from analyzers.validity import CAVEATS, ValidityThresholds
from traces import schema as s

Verdict = Literal["pass", "breach", "invalid", "infrastructure"]
EXIT_CODES: Final = {"pass": 0, "breach": 1, "invalid": 3, "infrastructure": 4}
INFRA_OUTCOMES: Final = (s.OUTCOME_CONNECT_ERROR, s.OUTCOME_TIMEOUT)
INFRA_HTTP_STATUS: Final = (502, 503, 504)
DEFAULT_REGRESSION_CHECKS: Final = (
    (e.TTFT_MS, 50.0),
    (e.TTFT_MS, 99.0),
    (e.TPOT_MS, 50.0),
    (e.TPOT_MS, 99.0),
    (e.E2E_MS, 99.0),
)
"""What a baseline comparison checks when the SLOs name no latency percentile."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GateOptions:
    """What the gate checks. ``max_regression`` is relative (0.1: 10% worse)."""

    slos: SLOSet = field(default_factory=SLOSet)
    selection: RowSelection = field(default_factory=RowSelection)
    baseline: Path | None = None
    max_regression: float = 0.10
    resamples: int = DEFAULT_RESAMPLES
    confidence: float = DEFAULT_CONFIDENCE
    seed: int = 0
    infra_share: float = 0.5
    allow_different_traces: bool = False
    cache: CacheOptions | None = None
    """Where the trace for ``cache_fidelity`` is and the KV block size (None: run.json's)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RegressionResult:
    """One baseline check: the difference (run minus baseline) and whether it fails."""

    workload: str
    metric: str
    percentile: float | None
    difference: Difference
    tolerance: float
    worse_by: float | None
    """Relative change in the worse direction (0.3: 30% worse), None when undefined."""
    failed: bool
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class InfraCheck:
    """How many requests never got a server answer (connect errors, timeouts, 502-504)."""

    requests: int
    ok: int
    unreachable: int
    failed: bool
    reason: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class GateReport:
    """Everything a gate found, and its verdict."""

    run: str
    baseline: str | None
    objectives: tuple[ObjectiveResult, ...]
    regressions: tuple[RegressionResult, ...]
    problems: tuple[str, ...]
    infra: InfraCheck
    requests: int
    error_rate: float
    verdict: Verdict
    warnings: tuple[str, ...] = ()
    """Caveats that do not change the verdict (``backpressure``), one line each."""

    @property
    def exit_code(self) -> int:
        """0 pass, 1 breach, 3 invalid run, 4 endpoint or infrastructure failure."""
        return EXIT_CODES[self.verdict]

    @property
    def summary(self) -> str:
        """One line: the verdict and what caused it."""
        failed = [r for r in self.objectives if not r.passed]
        regressed = [r for r in self.regressions if r.failed]
        if self.verdict == "infrastructure":
            return f"INFRASTRUCTURE FAILURE: {self.infra.reason}"
        if self.verdict == "invalid":
            return f"INVALID RUN: {self.problems[0]}" + (
                f" (+{len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
            )
        if self.verdict == "breach":
            parts = [f"{r.objective.label}: {r.message}" for r in failed]
            parts += [r.message for r in regressed]
            more = f" (+{len(parts) - 1} more)" if len(parts) > 1 else ""
            return f"SLO BREACH: {parts[0]}{more}"
        checked = len(self.objectives) + len(self.regressions)
        return f"PASS: {checked} check(s) hold"


def infrastructure_check(
    run: Path | str, selection: RowSelection, infra_share: float
) -> InfraCheck:
    """Count requests that never reached a working server."""
    lf = select_rows(scan_run(run), selection)
    outcome, status = pl.col(s.OUTCOME), pl.col(s.HTTP_STATUS)
    unreachable = outcome.is_in(list(INFRA_OUTCOMES)) | (
        (outcome == s.OUTCOME_HTTP_ERROR) & status.is_in(list(INFRA_HTTP_STATUS))
    )
    counts = lf.select(pl.len(), e.is_ok().sum().alias("_ok"), unreachable.sum().alias("_bad"))
    n, ok, bad = counts.collect().row(0)
    n, ok, bad = int(n), int(ok or 0), int(bad or 0)
    reason = None
    if n and ok == 0:
        reason = f"none of {n} requests succeeded ({bad} connect errors, timeouts or 502-504)"
    elif n and bad / n >= infra_share:
        reason = (
            f"{bad} of {n} requests ({bad / n:.0%}) were connect errors, timeouts or 502-504 "
            f"(>= {infra_share:.0%}): the endpoint or the network failed"
        )
    return InfraCheck(requests=n, ok=ok, unreachable=bad, failed=reason is not None, reason=reason)


def analysis_options(
    slos: SLOSet, selection: RowSelection, cache: CacheOptions | None = None
) -> AnalysisOptions:
    """The analysis a gate needs: the objectives' percentiles, goodput targets, lag limit,
    and the expected cached tokens when an objective checks ``cache_fidelity`` (``cache``:
    where the trace is, None: where ``run.json`` says)."""
    percentiles = tuple(sorted({*DEFAULT_PERCENTILES, *slos.percentiles}))
    wants_cache = any(o.metric == "cache_fidelity" for o in slos.objectives)
    return AnalysisOptions(
        cache=(cache or CacheOptions()) if wants_cache else None,
        percentiles=percentiles,
        by_workload=True,
        selection=selection,
        slo=slos.goodput,
        thresholds=ValidityThresholds(
            max_schedule_lag_p99_ms=slos.validity.max_schedule_lag_ms,
            tail_factor=max(slos.validity.min_tail_samples, 1e-9),
        ),
    )


def _regression_checks(slos: SLOSet) -> list[tuple[str | None, str, float | None]]:
    checks: list[tuple[str | None, str, float | None]] = []
    for o in slos.objectives:
        key = (o.workload, o.metric, o.percentile)
        if o.metric in LATENCY_METRICS and o.percentile is not None and key not in checks:
            checks.append(key)
        if o.metric == "goodput" and key not in checks:
            checks.append(key)
    if not any(m in LATENCY_METRICS for _, m, _ in checks):
        checks += [(None, m, p) for m, p in DEFAULT_REGRESSION_CHECKS]
    return checks


def _judge(
    workload: str | None,
    metric: str,
    percentile: float | None,
    diff: Difference,
    tolerance: float,
    higher_is_worse: bool,
) -> RegressionResult:
    sign = 1 if higher_is_worse else -1
    rel = diff.relative
    worse_by = sign * rel.estimate if rel is not None else None
    ci_worse = diff.absolute.low > 0 if higher_is_worse else diff.absolute.high < 0
    failed = worse_by is not None and worse_by > tolerance and ci_worse
    stat = f".p{percentile:g}" if percentile is not None else ""
    name = f"{workload + ':' if workload else ''}{metric}{stat}"
    rel_text = (
        f"{rel.estimate:+.1%} [{rel.low:+.1%}, {rel.high:+.1%}]" if rel is not None else "n/a"
    )
    verdict = "REGRESSION" if failed else "ok"
    message = (
        f"{name} vs baseline: {diff.a:.4g} -> {diff.b:.4g} ({rel_text}), tolerance "
        f"{tolerance:.0%}: {verdict}"
    )
    if not failed and worse_by is not None and worse_by > tolerance:
        message += " (worse, but the interval includes no change)"
    return RegressionResult(
        workload=workload or e.ALL,
        metric=metric,
        percentile=percentile,
        difference=diff,
        tolerance=tolerance,
        worse_by=worse_by,
        failed=failed,
        message=message,
    )


def regressions(
    run_analysis: Analysis,
    base_analysis: Analysis,
    run_values: RunSamples,
    base_values: RunSamples,
    options: GateOptions,
) -> tuple[RegressionResult, ...]:
    """Every baseline check (see the module docstring)."""
    out: list[RegressionResult] = []
    for i, (workload, metric, percentile) in enumerate(_regression_checks(options.slos)):
        seed = options.seed + 7919 * i
        if metric == "goodput":
            a, b = class_of(base_analysis, workload), class_of(run_analysis, workload)
            if a is None or b is None or a.goodput is None or b.goodput is None:
                continue
            diff = proportion_difference(
                a.goodput.good,
                a.goodput.requests,
                b.goodput.good,
                b.goodput.requests,
                resamples=options.resamples,
                confidence=options.confidence,
                seed=seed,
            )
            out.append(_judge(workload, metric, None, diff, options.max_regression, False))
            continue
        name = workload or e.ALL
        sa, sb = base_values.get(metric, name), run_values.get(metric, name)
        if sa is None or sb is None or percentile is None:
            continue
        diff = percentile_difference(
            sa,
            sb,
            percentile,
            resamples=options.resamples,
            confidence=options.confidence,
            seed=seed,
        )
        out.append(_judge(workload, metric, percentile, diff, options.max_regression, True))
    return tuple(out)


def gate(run: Path | str, options: GateOptions) -> GateReport:
    """Judge ``run`` (see the module docstring); raises ``InvalidRunError`` when the run
    cannot be read at all and ``DifferentTracesError`` for a baseline of another trace."""
    if not options.slos.objectives and options.baseline is None:
        raise AnalyzerError("nothing to check: give SLOs (--slo) or a baseline (--baseline)")
    infra = infrastructure_check(run, options.selection, options.infra_share)
    if infra.requests == 0:
        raise InvalidRunError(f"{run}: no requests left to judge after the row selection")
    aopts = analysis_options(options.slos, options.selection, options.cache)
    analysis = analyze(run, aopts)
    results = evaluate(analysis, options.slos)
    problems = list(validity_problems(analysis, options.slos))
    warnings = [f.reason for f in analysis.validity.flags if f.kind in CAVEATS]
    found: tuple[RegressionResult, ...] = ()
    base_infra = None
    if options.baseline is not None:
        check_same_trace([options.baseline, run], options.allow_different_traces)
        base_infra = infrastructure_check(options.baseline, options.selection, 1.0)
        base_analysis = analyze(options.baseline, aopts)
        problems += [f"baseline: {p}" for p in validity_problems(base_analysis, options.slos)]
        warnings += [
            f"baseline: {f.reason}" for f in base_analysis.validity.flags if f.kind in CAVEATS
        ]
        if base_infra.ok == 0:
            problems.append(f"baseline: no request succeeded in {options.baseline}")
        checks = _regression_checks(options.slos)
        metrics = tuple(sorted({m for _, m, _ in checks if m in LATENCY_METRICS}))
        found = regressions(
            analysis,
            base_analysis,
            run_samples(run, metrics=metrics, selection=options.selection),
            run_samples(options.baseline, metrics=metrics, selection=options.selection),
            options,
        )
    verdict: Verdict = "pass"
    if infra.failed:
        verdict = "infrastructure"
    elif problems:
        verdict = "invalid"
    elif any(not r.passed for r in results) or any(r.failed for r in found):
        verdict = "breach"
    return GateReport(
        run=str(run),
        baseline=str(options.baseline) if options.baseline is not None else None,
        objectives=results,
        regressions=found,
        problems=tuple(problems),
        infra=infra,
        requests=analysis.overall.requests,
        error_rate=analysis.overall.error_rate,
        verdict=verdict,
        warnings=tuple(warnings),
    )


def verdict_error(report: GateReport) -> AnalyzerError | None:
    """The exception (with its exit code) a failed gate raises; None when it passed."""
    if report.verdict == "infrastructure":
        return InfrastructureError(report.summary)
    if report.verdict == "invalid":
        return InvalidRunError(report.summary)
    if report.verdict == "breach":
        return SLOBreach(report.summary)
    return None
