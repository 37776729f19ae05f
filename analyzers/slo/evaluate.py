"""SLO evaluation: check an ``SLOSet``'s objectives and validity against an ``Analysis``.

``evaluate(analysis, slos)`` checks every objective against an ``Analysis`` and returns
one ``ObjectiveResult`` each: observed value, margin (positive: headroom) and status;
``validity_problems`` says which ``[validity]`` requirements the run misses. The rules
themselves (dataclasses, TOML and command-line parsing) are ``analyzers.slo.parse``.
Must not import loadgen, httpx or polars.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final, Literal

from analyzers import exprs as e
from analyzers.analysis import Analysis, ClassSummary
from analyzers.slo.parse import (
    CACHE_METRICS,
    LATENCY_METRICS,
    RUN_METRICS,
    Objective,
    SLOSet,
    format_value,
)
from analyzers.validity import min_requests_for

Status = Literal["pass", "fail", "no_data"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ObjectiveResult:
    """One objective checked: the observed value and the margin (positive: headroom).

    ``margin`` is ``threshold - observed`` for ``<=`` and ``observed - threshold`` for
    ``>=``, in the metric's unit; ``margin_fraction`` is the margin over the threshold.
    ``samples`` is the number of values the statistic rests on.
    """

    objective: Objective
    observed: float | None
    margin: float | None
    margin_fraction: float | None
    status: Status
    samples: int
    message: str

    @property
    def passed(self) -> bool:
        """The objective holds."""
        return self.status == "pass"


def class_of(analysis: Analysis, workload: str | None) -> ClassSummary | None:
    """The summary an objective looks at: the whole run, or one workload class."""
    if workload is None or workload == e.ALL:
        return analysis.overall
    for c in analysis.classes:
        if c.workload == workload:
            return c
    return None


def run_metric_value(summary: ClassSummary, metric: str) -> tuple[float | None, int]:
    """The value of a ``RUN_METRICS`` metric and the requests it rests on."""
    if metric in ("goodput", "goodput_rate"):
        if summary.goodput is None:
            return None, 0
        g = summary.goodput
        return (g.fraction if metric == "goodput" else g.rate_per_s), g.requests
    if metric in CACHE_METRICS:
        f = summary.fidelity
        if metric == "cache_hit_ratio":
            return (f.cached_share if f.cached_reported else None), f.cached_reported
        compared = f.expected
        if compared is None or not f.cached_reported:
            return None, 0
        return compared.fidelity, compared.requests
    values = {
        "error_rate": summary.error_rate,
        "requests_per_s": summary.requests_per_s,
        "output_tokens_per_s": summary.output_tokens_per_s,
        "total_tokens_per_s": summary.total_tokens_per_s,
        "items_per_s": summary.items_per_s,
        "input_tokens_per_s": summary.input_tokens_per_s,
    }
    return values[metric], summary.requests


def cache_no_data(analysis: Analysis, summary: ClassSummary, metric: str) -> str:
    """Why a cache metric has no value: the server never reported cached tokens, the
    expectation has no trace, or the trace's prefixes allow no cached tokens."""
    f = summary.fidelity
    if not f.cached_reported:
        return "the server reported no cached tokens (no usage.prompt_tokens_details.cached_tokens)"
    if metric == "cache_hit_ratio":
        return "no request reported a non-empty prompt"
    basis = analysis.cache_basis
    if basis is None:
        return "no expected cached tokens were computed"
    if basis.unavailable is not None:
        return f"no expected cached tokens: {basis.unavailable}"
    if f.expected is None:
        return "no request has an expectation (images or the trace's own text)"
    return "the trace's prefixes allow no cached tokens"


def observe(analysis: Analysis, objective: Objective) -> tuple[float | None, int]:
    """The observed value of an objective's statistic and the samples it rests on."""
    summary = class_of(analysis, objective.workload)
    if summary is None:
        return None, 0
    if objective.metric in RUN_METRICS:
        return run_metric_value(summary, objective.metric)
    stats = summary.metric(objective.metric)
    if objective.stat == "mean":
        return stats.mean, stats.count
    if objective.stat == "max":
        return stats.max, stats.count
    assert objective.percentile is not None
    return stats.value(objective.percentile), stats.count


def check(
    objective: Objective, observed: float | None, samples: int, why: str | None = None
) -> ObjectiveResult:
    """Judge one observed value against its objective (``why``: the reason for no value)."""
    unit = objective.unit
    if observed is None:
        if why is None:
            why = (
                "no goodput: give [goodput] targets or per-request SLOs in the trace"
                if objective.metric.startswith("goodput")
                else "no samples"
            )
            if objective.workload is not None and samples == 0:
                why = f"no requests of class '{objective.workload}'"
        return ObjectiveResult(
            objective=objective,
            observed=None,
            margin=None,
            margin_fraction=None,
            status="no_data",
            samples=samples,
            message=why,
        )
    margin = (
        objective.threshold - observed if objective.op == "<=" else observed - objective.threshold
    )
    passed = margin >= 0
    fraction = margin / objective.threshold if objective.threshold else None
    verb = "meets" if passed else "breaks"
    message = (
        f"{format_value(observed, unit)} {verb} {objective.op} "
        f"{format_value(objective.threshold, unit)} (margin {format_value(margin, unit)})"
    )
    return ObjectiveResult(
        objective=objective,
        observed=observed,
        margin=margin,
        margin_fraction=fraction,
        status="pass" if passed else "fail",
        samples=samples,
        message=message,
    )


def evaluate(analysis: Analysis, slos: SLOSet) -> tuple[ObjectiveResult, ...]:
    """Check every objective against ``analysis`` (computed with ``slos.percentiles`` and
    ``slos.goodput``: see ``analysis_percentiles``)."""
    out = []
    for objective in slos.objectives:
        observed, samples = observe(analysis, objective)
        summary = class_of(analysis, objective.workload)
        why = None
        if summary is not None and observed is None and objective.metric in CACHE_METRICS:
            why = cache_no_data(analysis, summary, objective.metric)
        result = check(objective, observed, samples, why)
        if (
            result.status == "no_data"
            and objective.metric in _STREAMED_METRICS
            and summary is not None
            and summary.embeddings_only
        ):
            result = replace(
                result,
                message=f"no samples: embeddings stream no tokens ({objective.metric} does "
                "not apply; the latency is e2e_ms, the rate items_per_s)",
            )
        out.append(result)
    return tuple(out)


_STREAMED_METRICS: Final = frozenset({e.TTFT_MS, e.TTFT_FROM_DUE_MS, e.TPOT_MS, e.ITL_MS})
"""Metrics that only streamed APIs give samples of."""


def validity_problems(analysis: Analysis, slos: SLOSet) -> tuple[str, ...]:
    """The ``[validity]`` requirements the analysed run misses, one line each."""
    req = slos.validity
    problems: list[str] = []
    flags = analysis.validity.flags
    if not req.allow_client_bound:
        problems.extend(f.reason for f in flags if f.kind == "client_bound")
    if not req.allow_unfaithful:
        problems.extend(f.reason for f in flags if f.kind == "unfaithful")
    # A simulator that slipped did not model what it claims: nothing to allow.
    problems.extend(f.reason for f in flags if f.kind == "sim_slip")
    checked: dict[str | None, set[float]] = {}
    for o in slos.objectives:
        if o.metric in LATENCY_METRICS:
            p = o.percentile if o.percentile is not None else 0.0
            checked.setdefault(o.workload, set()).add(p)
    for workload, pcts in checked.items():
        summary = class_of(analysis, workload)
        if summary is None:
            continue
        ok = summary.ok
        name = workload or e.ALL
        if ok < req.min_requests:
            problems.append(
                f"too small: '{name}' has {ok} ok requests, the SLO file asks for "
                f">= {req.min_requests}"
            )
        if req.min_tail_samples > 0:
            for p in sorted(pcts):
                need = min_requests_for(p, req.min_tail_samples) if p > 0 else 1
                if ok < need:
                    problems.append(
                        f"too small: p{p:g} of '{name}' rests on {ok} ok requests (needs >= {need})"
                    )
    return tuple(problems)
