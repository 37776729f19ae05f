"""TTFT decomposition, aggregated: per class and percentile, the tail's composition, each
term against its budget, and the verdicts a user acts on.

For each class and percentile ``p`` of the total (``first_token - due``): every term's own
``p``-th percentile; the *tail*, the requests whose total is at or beyond it, and the mean
of each term over the tail (these add up to the tail's mean total, an overshoot of the
predictions included); each term's budget, meaned over the tail. Verdicts: which term
breaks ``--slo-ttft-ms`` at each percentile, the longest uncached prompt the budget allows
within the SLO at zero queue, and the arrival rate from which queueing takes at least half
of the server's time. Must not import loadgen or httpx.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

import polars as pl

from analyzers import exprs as e
from analyzers.budget.prefill import max_prompt_for_ttft
from analyzers.decompose.columns import (
    IN_FLIGHT,
    NETWORK_UNIDENTIFIED,
    OVERSHOOT_MS,
    SERVER_SIDE_MS,
    TERMS,
    TOTAL_MS,
    budget_col,
    term_col,
)
from analyzers.decompose.options import DecomposeOptions
from analyzers.decompose.results import (
    CalibrationResult,
    NetworkEstimate,
    RequestTerms,
    SourceOf,
    Unidentified,
)
from analyzers.validity import RunValidity
from traces import schema as s

_NON_PREFILL: Final = tuple(t for t in TERMS if t not in ("prefill", "queue"))


@dataclass(frozen=True, slots=True, kw_only=True)
class TermStat:
    """One term at one percentile: its own percentile, its mean over the tail, its budget
    (meaned over the tail; None: no budget) and the excess ``tail_mean - budget``."""

    term: str
    percentile_ms: float | None
    tail_mean_ms: float | None
    budget_ms: float | None
    excess_ms: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class TailComposition:
    """The requests at or beyond percentile ``p`` of the total and what they are made of."""

    percentile: float
    ttft_ms: float | None
    tail_requests: int
    tail_mean_ttft_ms: float | None
    overshoot_mean_ms: float
    terms: tuple[TermStat, ...]

    def term(self, name: str) -> TermStat:
        """The stats of term ``name``."""
        for t in self.terms:
            if t.term == name:
                return t
        raise KeyError(name)


@dataclass(frozen=True, slots=True, kw_only=True)
class SloBreak:
    """Percentile ``p`` of TTFT (from due) exceeds the SLO; ``term`` is to blame."""

    percentile: float
    ttft_ms: float
    slo_ms: float
    term: str
    term_ms: float
    budget_ms: float | None
    budget_misses_slo: bool
    """True when the budgets alone (queue excluded) exceed the SLO: no load level meets it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassDecomposition:
    """One class (``exprs.ALL``: the run): its tails, SLO breaks and verdicts."""

    workload: str
    requests: int
    overshoots: int
    tails: tuple[TailComposition, ...]
    slo_breaks: tuple[SloBreak, ...]
    max_prompt_tokens: int | None
    verdicts: tuple[str, ...]
    network_unidentified: int = 0
    """Requests whose server TTFT exceeds the client's view (network booked as 0)."""
    network_skew_ms: float = 0.0
    """The largest such excess, ms (>= 0)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadWindow:
    """Requests sent in ``[start_s, start_s + window)``: their rate, the mean number in
    flight at send, and the queue's share of their server-side time."""

    start_s: float
    requests: int
    arrival_rate_per_s: float
    mean_in_flight: float
    mean_queue_ms: float
    queue_share: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Decomposition:
    """The result of ``decompose``."""

    run: str
    options: DecomposeOptions
    budget_source: str | None
    prediction: str
    """How the server terms were predicted ("" when the server's timings were used)."""
    network: NetworkEstimate
    calibration: CalibrationResult | None
    sources: tuple[SourceOf, ...]
    overall: ClassDecomposition
    classes: tuple[ClassDecomposition, ...]
    window_s: float
    load: tuple[LoadWindow, ...]
    queue_dominates_at_per_s: float | None
    verdicts: tuple[str, ...]
    validity: RunValidity
    unidentified: tuple[Unidentified, ...] = ()
    """Terms the run does not identify for some requests (null there), and why."""
    chunking: str = ""
    """What the deployment's chunk size does to ITL and TTFT p99 at the run's load ("":
    not computed: no budget, no load replay, or disaggregated)."""


def _f(value: Any) -> float | None:
    return float(value) if value is not None else None


def _tails(frame: pl.LazyFrame, group: bool, percentiles: tuple[float, ...]) -> list[pl.LazyFrame]:
    """One query per percentile: the means over the requests at or beyond it."""
    total = pl.col(TOTAL_MS)
    queries = []
    for p in percentiles:
        cut = total.quantile(p / 100, interpolation="linear")
        tail = frame.with_columns((cut.over(e.CLASS) if group else cut).alias("_cut")).filter(
            total >= pl.col("_cut")
        )
        aggs = [
            pl.col("_cut").first().alias("_cut"),
            pl.len().alias("_n"),
            total.mean().alias("_mean"),
            pl.col(OVERSHOOT_MS).mean().alias("_over"),
            *(pl.col(term_col(t)).mean().alias(f"_t_{t}") for t in TERMS),
            *(pl.col(budget_col(t)).mean().alias(f"_b_{t}") for t in TERMS),
        ]
        if group:
            queries.append(tail.group_by(e.CLASS).agg(aggs))
        else:
            queries.append(tail.select(pl.lit(e.ALL).alias(e.CLASS), *aggs))
    return queries


def _term_percentiles(
    frame: pl.LazyFrame, group: bool, percentiles: tuple[float, ...]
) -> pl.LazyFrame:
    aggs = [
        pl.len().alias("_n"),
        pl.col("overshoot_flag").sum().alias("_flagged"),
        pl.col(NETWORK_UNIDENTIFIED).sum().alias("_skewed"),
        pl.when(pl.col(NETWORK_UNIDENTIFIED)).then(-pl.col(OVERSHOOT_MS)).max().alias("_skew_ms"),
        *(
            pl.col(c).quantile(p / 100, interpolation="linear").alias(f"{c}__p{p:g}")
            for p in percentiles
            for c in (TOTAL_MS, *(term_col(t) for t in TERMS))
        ),
    ]
    if group:
        return frame.group_by(e.CLASS).agg(aggs)
    return frame.select(pl.lit(e.ALL).alias(e.CLASS), *aggs)


def _slo_break(tail: TailComposition, slo_ms: float) -> SloBreak | None:
    if tail.ttft_ms is None or tail.ttft_ms <= slo_ms:
        return None
    candidates = [t for t in tail.terms if t.tail_mean_ms is not None]
    if not candidates:
        return None
    budgets = sum(t.budget_ms or 0.0 for t in candidates if t.term != "queue")
    misses = budgets > slo_ms
    if misses:
        # The budget alone misses the SLO: the largest budgeted term is the culprit.
        worst = max(candidates, key=lambda t: t.budget_ms or 0.0)
    else:
        worst = max(candidates, key=lambda t: t.excess_ms or 0.0)
    return SloBreak(
        percentile=tail.percentile,
        ttft_ms=tail.ttft_ms,
        slo_ms=slo_ms,
        term=worst.term,
        term_ms=worst.tail_mean_ms or 0.0,
        budget_ms=worst.budget_ms,
        budget_misses_slo=misses,
    )


def _solve_quadratic(cal: CalibrationResult, room_ms: float) -> int | None:
    """Largest n with ``a + b n + c n^2 <= room`` (ms), or None without a fit."""
    if cal.a_ms is None or cal.b_us_per_token is None or cal.c_ns_per_token2 is None:
        return None
    a, b, c = cal.a_ms - room_ms, cal.b_us_per_token / 1e3, cal.c_ns_per_token2 / 1e6
    if a > 0:
        return 0
    if abs(c) < 1e-15:
        return int(-a / b) if b > 0 else None
    disc = b * b - 4 * c * a
    if disc < 0:
        return None
    root = (-b + math.sqrt(disc)) / (2 * c)
    return max(0, int(root)) if root > 0 else None


def _max_prompt(terms: RequestTerms, tail: TailComposition, slo_ms: float) -> int | None:
    other = sum(
        t.tail_mean_ms or 0.0 for t in tail.terms if t.term in _NON_PREFILL and t.term != "queue"
    )
    room = slo_ms - other
    if room <= 0:
        return 0
    if terms.calibration is not None:
        solved = _solve_quadratic(terms.calibration, room)
        if solved is not None:
            return solved
    if terms.budget is None:
        return None
    return max_prompt_for_ttft(terms.budget.model, terms.budget.deployment, room / 1e3)


def _class(
    workload: str,
    stats: dict[str, Any],
    tails: list[dict[str, Any]],
    terms: RequestTerms,
    options: DecomposeOptions,
) -> ClassDecomposition:
    slo = options.slo_ttft_ms
    comps = []
    for p, row in zip(options.percentiles, tails, strict=True):
        term_stats = []
        for t in TERMS:
            mean = _f(row.get(f"_t_{t}"))
            budget = _f(row.get(f"_b_{t}"))
            term_stats.append(
                TermStat(
                    term=t,
                    percentile_ms=_f(stats.get(f"{term_col(t)}__p{p:g}")),
                    tail_mean_ms=mean,
                    budget_ms=budget,
                    excess_ms=None if mean is None else mean - (budget or 0.0),
                )
            )
        if slo is not None:
            others = sum(x.budget_ms or 0.0 for x in term_stats if x.term != "queue")
            term_stats = [
                TermStat(
                    term=x.term,
                    percentile_ms=x.percentile_ms,
                    tail_mean_ms=x.tail_mean_ms,
                    budget_ms=max(0.0, slo - others),
                    excess_ms=None
                    if x.tail_mean_ms is None
                    else x.tail_mean_ms - max(0.0, slo - others),
                )
                if x.term == "queue"
                else x
                for x in term_stats
            ]
        comps.append(
            TailComposition(
                percentile=p,
                ttft_ms=_f(stats.get(f"{TOTAL_MS}__p{p:g}")),
                tail_requests=int(row.get("_n") or 0),
                tail_mean_ttft_ms=_f(row.get("_mean")),
                overshoot_mean_ms=_f(row.get("_over")) or 0.0,
                terms=tuple(term_stats),
            )
        )
    breaks: list[SloBreak] = []
    verdicts: list[str] = []
    max_prompt = None
    if slo is not None:
        breaks = [b for c in comps if (b := _slo_break(c, slo)) is not None]
        for b in breaks[:1]:
            budget_text = f" (budget {b.budget_ms:.1f} ms)" if b.budget_ms is not None else ""
            why = (
                "; the budget alone misses the SLO: shorten the prompts or add compute"
                if b.budget_misses_slo
                else ""
            )
            verdicts.append(
                f"{workload}: p{b.percentile:g} TTFT {b.ttft_ms:.1f} ms > SLO {slo:g} ms; "
                f"{b.term} breaks it: {b.term_ms:.1f} ms in the tail{budget_text}{why}"
            )
        anchor = next((c for c in comps if c.percentile == 99.0), comps[-1] if comps else None)
        if anchor is not None:
            max_prompt = _max_prompt(terms, anchor, slo)
            if max_prompt is not None:
                verdicts.append(
                    f"{workload}: the budget allows prompts up to {max_prompt:,} uncached "
                    f"tokens within {slo:g} ms at zero queue (other terms at p"
                    f"{anchor.percentile:g})"
                )
        if not breaks:
            verdicts.append(f"{workload}: every reported percentile meets the {slo:g} ms SLO")
    return ClassDecomposition(
        workload=workload,
        requests=int(stats.get("_n") or 0),
        overshoots=int(stats.get("_flagged") or 0),
        tails=tuple(comps),
        slo_breaks=tuple(breaks),
        max_prompt_tokens=max_prompt,
        verdicts=tuple(verdicts),
        network_unidentified=int(stats.get("_skewed") or 0),
        network_skew_ms=float(stats.get("_skew_ms") or 0.0),
    )


def _load(frame: pl.DataFrame, first_due_ns: int, window_s: float) -> tuple[LoadWindow, ...]:
    w_ns = max(1, int(window_s * 1e9))
    rows = (
        frame.lazy()
        .group_by(((pl.col(s.DUE_NS) - first_due_ns) // w_ns).alias("_w"))
        .agg(
            pl.len().alias("_n"),
            pl.col(IN_FLIGHT).mean().alias("_inflight"),
            pl.col(term_col("queue")).mean().alias("_queue"),
            (pl.col(term_col("queue")).sum() / pl.col(SERVER_SIDE_MS).sum()).alias("_share"),
        )
        .sort("_w")
        .collect()
    )
    return tuple(
        LoadWindow(
            start_s=int(w) * window_s,
            requests=int(n),
            arrival_rate_per_s=n / window_s,
            mean_in_flight=float(inflight or 0.0),
            mean_queue_ms=float(queue or 0.0),
            queue_share=float(share or 0.0),
        )
        for w, n, inflight, queue, share in rows.iter_rows()
    )


def build_decomposition(
    run: str,
    terms: RequestTerms,
    options: DecomposeOptions,
    *,
    window_s: float,
    validity: RunValidity,
) -> Decomposition:
    """Aggregate a ``RequestTerms`` into a ``Decomposition``."""
    lf = terms.frame.lazy()
    pcts = options.percentiles
    queries = [_term_percentiles(lf, False, pcts), *_tails(lf, False, pcts)]
    if options.by_workload:
        queries += [_term_percentiles(lf, True, pcts), *_tails(lf, True, pcts)]
    frames = pl.collect_all(queries)
    k = len(pcts) + 1

    def classes(block: list[pl.DataFrame]) -> list[ClassDecomposition]:
        stats = {str(r[e.CLASS]): r for r in block[0].iter_rows(named=True)}
        tails = [{str(r[e.CLASS]): r for r in f.iter_rows(named=True)} for f in block[1:]]
        return [
            _class(name, stats[name], [t.get(name, {}) for t in tails], terms, options)
            for name in sorted(stats)
        ]

    overall = classes(frames[:k])[0]
    by_class = tuple(classes(frames[k:])) if options.by_workload else ()
    load = _load(terms.frame, terms.first_due_ns, window_s)
    dominated = [
        w for w in load if w.queue_share >= options.queue_dominates_share and w.requests > 0
    ]
    at = min((w.arrival_rate_per_s for w in dominated), default=None)
    verdicts = [v for c in (overall, *by_class) for v in c.verdicts]
    share = f"{options.queue_dominates_share:.0%}"
    if at is not None:
        w = min(dominated, key=lambda x: x.arrival_rate_per_s)
        verdicts.append(
            f"queueing takes >= {share} of server time from {at:.1f} req/s "
            f"(mean {w.mean_in_flight:.1f} in flight)"
        )
    elif load:
        top = max(load, key=lambda x: x.arrival_rate_per_s)
        verdicts.append(
            f"queueing stays under {share} of server time up to {top.arrival_rate_per_s:.1f} "
            f"req/s (max share {max(x.queue_share for x in load):.0%})"
        )
    if overall.network_unidentified:
        verdicts.append(
            f"network unidentifiable in {overall.network_unidentified} of {overall.requests} "
            f"requests: the server's TTFT exceeds the client's view by up to "
            f"{overall.network_skew_ms:.1f} ms (its clock started before the request was "
            "fully written, clock skew, or a time scale not applied); booked as 0, not as a "
            "negative time"
        )
    if overall.overshoots:
        verdicts.append(
            f"the predictions overshoot the measured server time in {overall.overshoots} of "
            f"{overall.requests} requests (queue clamped at 0): the budget is pessimistic"
        )
    return Decomposition(
        run=run,
        options=options,
        budget_source=terms.budget.source if terms.budget is not None else None,
        prediction=terms.prediction,
        network=terms.network,
        calibration=terms.calibration,
        sources=terms.sources,
        overall=overall,
        classes=by_class,
        window_s=window_s,
        load=load,
        queue_dominates_at_per_s=at,
        verdicts=tuple(verdicts),
        validity=validity,
        unidentified=terms.unidentified,
    )
