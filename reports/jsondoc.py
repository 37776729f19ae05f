"""JSON documents of an ``Analysis``, a ``Decomposition``, a ``GateReport`` and the
comparisons (their verdicts as the other reports print them): plain values for machines,
every key with a unit carries it (``ttft_ms``, ``rate_per_s``). The only place where
analyzers' results become dicts. Must not import loadgen or httpx.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from analyzers.analysis import Analysis, ClassSummary, MetricStats
from analyzers.cache import CacheBasis, CacheTokens
from analyzers.decompose.report import ClassDecomposition, Decomposition
from analyzers.slo.gate import GateReport
from analyzers.validity import RunValidity

if TYPE_CHECKING:
    from collections.abc import Iterable

    from analyzers.compare.crossover import SweepComparison
    from analyzers.compare.runs import Comparison
    from analyzers.compare.verdict import ComparisonVerdict
    from analyzers.server_metrics import ServerMetricsSummary


def _metric_json(m: MetricStats) -> dict[str, Any]:
    return {
        "count": m.count,
        "mean": m.mean,
        "max": m.max,
        **{f"p{pv.percentile:g}": pv.value for pv in m.percentiles},
    }


def cache_tokens_json(x: CacheTokens | None) -> dict[str, Any] | None:
    """Expected against reported cached tokens over the same requests (None: no such)."""
    if x is None:
        return None
    return {
        "requests": x.requests,
        "prompt_tokens": x.prompt_tokens,
        "expected_tokens": x.expected_tokens,
        "cached_tokens": x.cached_tokens,
        "expected_share": x.expected_share,
        "observed_share": x.observed_share,
        "fidelity": x.fidelity,
    }


def cache_basis_json(b: CacheBasis | None) -> dict[str, Any] | None:
    """What the expected cached tokens rest on (None: not asked for)."""
    if b is None:
        return None
    return {
        "available": b.available,
        "trace": b.trace,
        "trace_block_size": b.trace_block_size,
        "kv_block_size": b.kv_block_size,
        "kv_block_source": b.kv_block_source,
        "unavailable": b.unavailable,
        "note": b.note,
    }


def class_json(c: ClassSummary) -> dict[str, Any]:
    """One class as JSON values (metric keys carry the unit: ``ttft_ms``)."""
    gp = c.goodput
    return {
        "workload": c.workload,
        "requests": c.requests,
        "ok": c.ok,
        "error_rate": c.error_rate,
        "outcomes": {o.outcome: o.count for o in c.outcomes},
        "duration_s": c.duration_s,
        "requests_per_s": c.requests_per_s,
        "output_tokens": c.output_tokens,
        "output_tokens_per_s": c.output_tokens_per_s,
        "total_tokens_per_s": c.total_tokens_per_s,
        "embeddings_requests": c.embeddings,
        "items": c.items,
        "items_per_s": c.items_per_s,
        "input_tokens_per_s": c.input_tokens_per_s,
        "tool_calls": None
        if c.tool_calls is None
        else {
            "requests": c.tool_calls.requests,
            "calls": c.tool_calls.calls,
            "share": c.tool_calls.share,
            "tokens": c.tool_calls.tokens,
            "tokens_mean": c.tool_calls.tokens_mean,
        },
        "metrics": {m.key: _metric_json(m) for m in c.metrics},
        "prompt_fidelity": {
            "requests": c.fidelity.requests,
            "requested_tokens_mean": c.fidelity.requested_tokens_mean,
            "reported_tokens_mean": c.fidelity.reported_tokens_mean,
            "ratio_median": c.fidelity.ratio_median,
            "abs_error_median": c.fidelity.abs_error_median,
            "cached_tokens_mean": c.fidelity.cached_tokens_mean,
            "cached_fraction_mean": c.fidelity.cached_fraction_mean,
            "cached_share": c.fidelity.cached_share,
            "cached_reported": c.fidelity.cached_reported,
            "cache_expected": cache_tokens_json(c.fidelity.expected),
        },
        "goodput": None
        if gp is None
        else {
            "requests": gp.requests,
            "slo_requests": gp.slo_requests,
            "good": gp.good,
            "fraction": gp.fraction,
            "rate_per_s": gp.rate_per_s,
            "ttft_misses": gp.ttft_misses,
            "tpot_misses": gp.tpot_misses,
            "failed": gp.failed,
        },
    }


def validity_json(v: RunValidity) -> dict[str, Any]:
    """Flags and reasons as JSON values."""
    return {
        "valid": v.valid,
        "client_bound": v.client_bound,
        "unfaithful": v.unfaithful,
        "too_small": v.too_small,
        "backpressure": v.backpressure,
        "sim_slip": v.sim_slip,
        "stall": v.stall,
        "reasons": list(v.reasons),
    }


def analysis_json(a: Analysis) -> dict[str, Any]:
    """The whole analysis as JSON values."""
    sel = a.options.selection
    return {
        "run": a.run,
        "percentiles": list(a.options.percentiles),
        "selection": {
            "exclude_warmup": sel.exclude_warmup,
            "trim_start_s": sel.trim_start_s,
            "trim_end_s": sel.trim_end_s,
            "start_s": sel.start_s,
            "end_s": sel.end_s,
        },
        "slo": {
            "ttft_ms": a.options.slo.ttft_ms,
            "tpot_ms": a.options.slo.tpot_ms,
            "ttft_basis": a.options.slo.ttft_basis,
        },
        "overall": class_json(a.overall),
        "classes": [class_json(c) for c in a.classes],
        "window_s": a.window_s,
        "windows": [
            {
                "start_s": w.start_s,
                "arrivals": w.arrivals,
                "completed": w.completed,
                "output_tokens": w.output_tokens,
                "output_tokens_per_s": w.output_tokens_per_s,
                "total_tokens_per_s": w.total_tokens_per_s,
                "requests_per_s": w.requests_per_s,
            }
            for w in a.windows
        ],
        "health": {
            "schedule_lag_p99_ms": a.health.schedule_lag_p99_ms,
            "loop_lag_p99_ms": a.health.loop_lag_p99_ms,
            "loop_lag_max_ms": a.health.loop_lag_max_ms,
            "stamp_delay_p99_ms": a.health.stamp_delay_p99_ms,
            "stamp_delay_max_ms": a.health.stamp_delay_max_ms,
            "cpu_utilisation": a.health.cpu_utilisation,
        },
        "validity": validity_json(a.validity),
        "cache_by_turn": [
            {
                "turn": d.turn,
                "requests": d.requests,
                "prompt_tokens": d.prompt_tokens,
                "cached_tokens": d.cached_tokens,
                "share": d.share,
                "expected": cache_tokens_json(d.expected),
            }
            for d in a.cache_by_turn
        ],
        "cache_basis": cache_basis_json(a.cache_basis),
    }


def _class_json(c: ClassDecomposition) -> dict[str, Any]:
    return {
        "workload": c.workload,
        "requests": c.requests,
        "overshoots": c.overshoots,
        "max_prompt_tokens": c.max_prompt_tokens,
        "tails": [
            {
                "percentile": t.percentile,
                "ttft_ms": t.ttft_ms,
                "tail_requests": t.tail_requests,
                "tail_mean_ttft_ms": t.tail_mean_ttft_ms,
                "overshoot_mean_ms": t.overshoot_mean_ms,
                "terms": {
                    x.term: {
                        "percentile_ms": x.percentile_ms,
                        "tail_mean_ms": x.tail_mean_ms,
                        "budget_ms": x.budget_ms,
                        "excess_ms": x.excess_ms,
                    }
                    for x in t.terms
                },
            }
            for t in c.tails
        ],
        "slo_breaks": [
            {
                "percentile": b.percentile,
                "ttft_ms": b.ttft_ms,
                "slo_ms": b.slo_ms,
                "term": b.term,
                "term_ms": b.term_ms,
                "budget_ms": b.budget_ms,
                "budget_misses_slo": b.budget_misses_slo,
            }
            for b in c.slo_breaks
        ],
        "verdicts": list(c.verdicts),
    }


def decomposition_json(d: Decomposition) -> dict[str, Any]:
    """The decomposition as JSON values."""
    cal = d.calibration
    return {
        "run": d.run,
        "budget": d.budget_source,
        "prediction": d.prediction or None,
        "chunking": d.chunking or None,
        "percentiles": list(d.options.percentiles),
        "slo_ttft_ms": d.options.slo_ttft_ms,
        "server_timings_hidden": d.options.hide_server_timings,
        "network": {"value_ms": d.network.value_ms, "source": d.network.source},
        "sources": {x.term: x.source for x in d.sources},
        "unidentified": [
            {"term": u.term, "requests": u.requests, "reason": u.reason} for u in d.unidentified
        ],
        "calibration": None
        if cal is None
        else {
            "samples": cal.samples,
            "max_in_flight": cal.max_in_flight,
            "measured": cal.measured,
            "a_ms": cal.a_ms,
            "b_us_per_token": cal.b_us_per_token,
            "c_ns_per_token2": cal.c_ns_per_token2,
            "achieved_flops_per_s": cal.achieved_flops_per_s,
            "peak_flops_per_s": cal.peak_flops_per_s,
            "fraction_of_peak": cal.fraction_of_peak,
            "chunk_tokens": cal.chunk_tokens,
            "chunk_fitted": cal.chunk_fitted,
            "decode_efficiency": cal.decode_efficiency,
            "efficiency_from_load": cal.efficiency_from_load,
        },
        "overall": _class_json(d.overall),
        "classes": [_class_json(c) for c in d.classes],
        "window_s": d.window_s,
        "load": [
            {
                "start_s": w.start_s,
                "requests": w.requests,
                "arrival_rate_per_s": w.arrival_rate_per_s,
                "mean_in_flight": w.mean_in_flight,
                "mean_queue_ms": w.mean_queue_ms,
                "queue_share": w.queue_share,
            }
            for w in d.load
        ],
        "queue_dominates_at_per_s": d.queue_dominates_at_per_s,
        "verdicts": list(d.verdicts),
        "validity": validity_json(d.validity),
    }


def gate_json(report: GateReport) -> dict[str, Any]:
    """A gate's verdict, objectives, regressions and problems as JSON values."""
    return {
        "run": report.run,
        "baseline": report.baseline,
        "verdict": report.verdict,
        "exit_code": report.exit_code,
        "summary": report.summary,
        "objectives": [
            {
                "objective": r.objective.label,
                "metric": r.objective.metric,
                "workload": r.objective.workload,
                "observed": r.observed,
                "threshold": r.objective.threshold,
                "margin": r.margin,
                "status": r.status,
                "samples": r.samples,
            }
            for r in report.objectives
        ],
        "regressions": [
            {
                "metric": g.metric,
                "workload": g.workload,
                "percentile": g.percentile,
                "baseline": g.difference.a,
                "run": g.difference.b,
                "relative": g.difference.relative.estimate if g.difference.relative else None,
                "relative_low": g.difference.relative.low if g.difference.relative else None,
                "relative_high": g.difference.relative.high if g.difference.relative else None,
                "failed": g.failed,
            }
            for g in report.regressions
        ],
        "problems": list(report.problems),
        "warnings": list(report.warnings),
        "infrastructure": report.infra.reason,
    }


def verdict_json(v: ComparisonVerdict) -> dict[str, Any]:
    """A comparison's verdict: the same ``text`` every report prints, and why withheld."""
    return {
        "kind": v.kind,
        "text": v.text,
        "winner": v.winner,
        "loser": v.loser,
        "load": v.load,
        "withheld": v.withheld,
        "withheld_reason": v.withheld_reason,
    }


def sweep_comparison_json(c: SweepComparison) -> dict[str, Any]:
    """Two sweeps: the verdict, the knee lines, each step's goodput, SLO and validity."""
    return {
        "verdict": verdict_json(c.verdict),
        "verdicts": list(c.verdicts),
        "load_unit": c.a.load_unit,
        "sweeps": {
            s.label: [
                {
                    "label": st.label,
                    "offered": st.offered,
                    "requests": st.requests,
                    "goodput": st.goodput,
                    "meets_slo": st.meets_slo,
                    "valid": st.valid,
                    "flags": [{"kind": f.kind, "reason": f.reason} for f in st.flags],
                }
                for st in s.steps
            ]
            for s in (c.a, c.b)
        },
        "points": [{"load": p.load, c.a.label: p.a, c.b.label: p.b} for p in c.points],
    }


def comparison_json(c: Comparison) -> dict[str, Any]:
    """Runs against the first: the verdict lines (withheld or not) and every difference."""
    return {
        "labels": list(c.labels),
        "verdict": verdict_json(c.verdict) if c.verdict is not None else None,
        "verdicts": list(c.verdicts),
        "notes": list(c.notes),
        "metrics": [
            {
                "workload": d.workload,
                "metric": d.metric,
                "percentile": d.percentile,
                "label": d.label,
                "base": d.difference.a,
                "value": d.difference.b,
                "difference": d.difference.absolute.estimate,
                "low": d.difference.absolute.low,
                "high": d.difference.absolute.high,
                "significant": d.difference.significant,
                "requests": d.requests,
            }
            for d in c.metrics
        ],
    }


def server_metrics_json(
    summary: ServerMetricsSummary, timeline: Iterable[tuple[Any, ...]]
) -> dict[str, Any]:
    """``loadgen server-metrics --json``: the gauges (``null`` where the server exposed
    none), the queue and prefill cross-checks, and the timeline's rows (``t_s``,
    ``running``, ``waiting``, ``kv_usage``: the max of each bucket)."""
    return {
        "samples": summary.samples,
        "scrapes": summary.scrapes,
        "duration_s": summary.duration_s,
        "running": None if summary.running is None else asdict(summary.running),
        "waiting": None if summary.waiting is None else asdict(summary.waiting),
        "kv_usage": None if summary.kv_usage is None else asdict(summary.kv_usage),
        "queue": asdict(summary.queue),
        "prefill": None if summary.prefill is None else asdict(summary.prefill),
        "timeline": [
            {"t_s": t_s, "running": running, "waiting": waiting, "kv_usage": kv}
            for t_s, running, waiting, kv in timeline
        ],
    }
