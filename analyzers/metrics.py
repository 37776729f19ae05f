"""Run metrics: exact latency percentiles, throughput, outcomes, fidelity and goodput.

``analyze(run, options)`` returns one ``Analysis``: the run as a whole and, with
``by_workload``, each workload class; throughput over time windows; and the run's
``RunValidity`` (the types are :mod:`analyzers.analysis`'s). Definitions (formula, unit,
edge cases) are the builders' docstrings in ``analyzers.exprs`` and docs/analysis.md.
Latencies are over ``ok`` requests, the schedule lag over every sent request; ITL
percentiles weight a chunk of ``k`` tokens ``k`` times.
The throughput windows are ``analyzers.throughput``'s; the per-request frame and its
aggregations ``analyzers.request_frame``'s (``READ_COLUMNS`` and ``request_frame`` are
re-exported here).

Two collects: the run's bounds (to size the throughput windows), then every aggregation in
one ``pl.collect_all``. Must not import loadgen or httpx.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from analyzers import exprs as e
from analyzers import goodput as g
from analyzers.analysis import (
    METRICS,
    Analysis,
    AnalysisOptions,
    CacheDepth,
    ClassSummary,
    Fidelity,
    MetricSpec,
    MetricStats,
    OutcomeCount,
    PercentileValue,
    ToolCalls,
)
from analyzers.cache import EXPECTED_CACHED, CacheBasis, cache_expectation, cache_tokens
from analyzers.chunk_sums import (
    RequestPass,
    itl_counts_by_class,
    itl_keys,
    itl_weights,
    workloads,
)
from analyzers.frames import (
    run_health,
    scan_run,
    select_rows,
    summed_in_slices,
)
from analyzers.request_frame import (
    OUTCOME_OTHER,
    compared_aggs,
    request_aggs,
    request_quantiles,
    request_sums,
    with_expected,
)
from analyzers.request_frame import READ_COLUMNS as READ_COLUMNS
from analyzers.request_frame import request_frame as request_frame
from analyzers.throughput import (
    auto_window_s,
    token_window_query,
    window_queries,
    windows,
)
from analyzers.validity import ClassCount, RunValidity, ValidityThresholds, assess_validity
from traces import schema as s


def _itl_aggs(percentiles: tuple[float, ...]) -> list[pl.Expr]:
    v, w = pl.col(e.ITL_MS), pl.col("_w")
    key = e.ITL_MS
    return [
        w.sum().alias(f"{key}__count"),
        pl.when(w.sum() > 0).then(pl.col("_gw").sum() / (w.sum() * 1000)).alias(f"{key}__mean"),
        v.max().alias(f"{key}__max"),
        *(e.weighted_quantile(key, "_w", p) for p in percentiles),
    ]


def _stats(row: dict[str, Any], spec: MetricSpec, percentiles: tuple[float, ...]) -> MetricStats:
    def f(key: str) -> float | None:
        v = row.get(f"{spec.key}__{key}")
        return float(v) if v is not None else None

    return MetricStats(
        key=spec.key,
        name=spec.name,
        unit=spec.unit,
        count=int(row.get(f"{spec.key}__count") or 0),
        mean=f("mean"),
        max=f("max"),
        percentiles=tuple(PercentileValue(percentile=p, value=f(f"p{p:g}")) for p in percentiles),
    )


def _class_summary(
    row: dict[str, Any], itl: dict[str, Any] | None, options: AnalysisOptions
) -> ClassSummary:
    n = int(row["_n"])
    ok = int(row["_ok"] or 0)
    first, last = row["_first_sent"], row["_last_end"]
    duration = (last - first) / 1e9 if first is not None and last is not None else 0.0
    out_tokens = int(row["_out_tokens"] or 0)
    prompt_tokens = int(row["_ok_prompt"] or 0)
    per_s = 1 / duration if duration > 0 else 0.0
    outcomes = tuple(
        OutcomeCount(outcome=o, count=c, fraction=c / n if n else 0.0)
        for o in (*s.OUTCOMES, OUTCOME_OTHER)
        if (c := int(row[f"_outcome_{o}"] or 0))
    )
    p = options.percentiles
    metrics = []
    for spec in METRICS:
        if spec.key == e.ITL_MS:
            metrics.append(_stats(itl or {}, spec, p))
        else:
            metrics.append(_stats(row, spec, p))

    def opt(key: str) -> float | None:
        v = row[key]
        return float(v) if v is not None else None

    return ClassSummary(
        workload=str(row[e.CLASS]),
        requests=n,
        ok=ok,
        outcomes=outcomes,
        error_rate=(n - ok) / n if n else 0.0,
        duration_s=duration,
        requests_per_s=ok * per_s,
        output_tokens=out_tokens,
        output_tokens_per_s=out_tokens * per_s,
        total_tokens_per_s=(out_tokens + prompt_tokens) * per_s,
        metrics=tuple(metrics),
        fidelity=Fidelity(
            requests=int(row["_fid_n"] or 0),
            requested_tokens_mean=opt("_fid_req"),
            reported_tokens_mean=opt("_fid_rep"),
            ratio_median=opt("_fid_ratio"),
            abs_error_median=opt("_fid_err"),
            cached_tokens_mean=opt("_cached"),
            cached_fraction_mean=opt("_cached_frac"),
            cached_share=_share(row["_cached_sum"], row["_prompt_sum"]),
            cached_reported=int(row["_cached_n"] or 0),
            expected=cache_tokens(
                row["_cmp_n"], row["_cmp_prompt"], row["_cmp_exp"], row["_cmp_obs"]
            ),
        ),
        goodput=g.goodput_from_counts(
            requests=n,
            ok=ok,
            good=int(row[g.GOOD] or 0),
            slo_requests=int(row[g.HAS_SLO] or 0),
            ttft_misses=int(row[g.TTFT_MISS] or 0),
            tpot_misses=int(row[g.TPOT_MISS] or 0),
            duration_s=duration,
        ),
        embeddings=int(row["_embed"] or 0),
        items=int(row["_ok_items"] or 0),
        items_per_s=int(row["_ok_items"] or 0) * per_s,
        input_tokens_per_s=prompt_tokens * per_s,
        tool_calls=_tool_calls(row),
    )


def _tool_calls(row: dict[str, Any]) -> ToolCalls | None:
    """The class's tool-call replies, or None when it has none."""
    known, calls = int(row["_tool_known"] or 0), int(row["_tool_n"] or 0)
    if calls == 0:
        return None
    tokens = int(row["_tool_tokens"] or 0)
    return ToolCalls(
        requests=known, calls=calls, share=calls / known, tokens=tokens, tokens_mean=tokens / calls
    )


def _share(cached: object, prompt: object) -> float | None:
    if not isinstance(prompt, int) or prompt <= 0:
        return None
    return (cached if isinstance(cached, int) else 0) / prompt


def cache_depth_query(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Per turn depth of session rows: requests, summed reported prompt and cached tokens,
    and the ``_cmp_*`` sums beside the expectation where ``lf`` has ``EXPECTED_CACHED``.

    The depth is the row's ``turn`` where the run table has it, else the row's 1-based
    rank by due time (then trace index) within its session, counted over every row of the
    session so that a failed turn still takes its place (``scan_run`` fills a ``turn``
    column of nulls into runs that never recorded one: older replays, ``simulate``).
    """
    names = lf.collect_schema().names()
    rows = lf.filter(pl.col(s.SESSION_ID).is_not_null()).sort([s.DUE_NS, s.TRACE_INDEX])
    depth = pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over(s.SESSION_ID)
    if s.TURN in names:
        depth = pl.coalesce(pl.col(s.TURN).cast(pl.Int64), depth)
    prompt = pl.col(s.PROMPT_TOKENS).cast(pl.Int64)
    expected = pl.col(EXPECTED_CACHED) if EXPECTED_CACHED in names else pl.lit(None, pl.Int64)
    return (
        rows.select(
            depth.alias("_depth"),
            prompt.alias("_prompt"),
            pl.col(s.CACHED_TOKENS).cast(pl.Int64).fill_null(0).alias(s.CACHED_TOKENS),
            expected.alias(EXPECTED_CACHED),
        )
        .filter(pl.col("_prompt") > 0)
        .group_by("_depth")
        .agg(
            pl.len().alias("_n"),
            pl.col("_prompt").sum(),
            pl.col(s.CACHED_TOKENS).sum().alias("_cached"),
            *compared_aggs(pl.col("_prompt")),
        )
        .sort("_depth")
    )


def _cache_depths(frame: pl.DataFrame) -> tuple[CacheDepth, ...]:
    return tuple(
        CacheDepth(
            turn=int(r["_depth"]),
            requests=int(r["_n"]),
            prompt_tokens=int(r["_prompt"]),
            cached_tokens=int(r["_cached"]),
            share=int(r["_cached"]) / int(r["_prompt"]),
            expected=cache_tokens(r["_cmp_n"], r["_cmp_prompt"], r["_cmp_exp"], r["_cmp_obs"]),
        )
        for r in frame.iter_rows(named=True)
        if r["_depth"] is not None
    )


def analyze(run: Path | str, options: AnalysisOptions | None = None) -> Analysis:
    """Analyze a run directory, Parquet file or glob of shards (see ``AnalysisOptions``)."""
    return analyze_pass(run, options)[0]


def analyze_pass(
    run: Path | str, options: AnalysisOptions | None = None
) -> tuple[Analysis, RequestPass]:
    """``analyze``, and the rows it read (``RequestPass``) for the report's series."""
    options = options or AnalysisOptions()
    lf = select_rows(scan_run(run), options.selection)
    basis: CacheBasis | None = None
    expected = None
    if options.cache is not None:
        expected, basis = cache_expectation(run, options.cache)
    lf = with_expected(lf, expected)
    bounds = lf.select(
        pl.len().alias("n"), pl.col(s.DUE_NS).min().alias("t0"), pl.col(s.END_NS).max()
    ).collect()
    n, t0, t_end = bounds.row(0)
    t0 = int(t0) if t0 is not None else 0
    span_s = max(((t_end or t0) - t0) / 1e9, 0.0)
    window_s = options.window_s or auto_window_s(span_s)
    pcts = tuple(options.percentiles)
    req = request_frame(lf, options.slo, options.by_workload, expected=expected is not None)
    aggs = request_aggs(pcts)
    itl_aggs = _itl_aggs(pcts)
    # One pass over the run, a slice of requests at a time where the selection allows it:
    # the chunk sums add up over slices exactly, the per-request rows are concatenated.
    bw = options.by_workload
    window_ns = max(1, int(window_s * 1e9))
    classes_of_run = workloads(lf) if bw else None
    sliced = summed_in_slices(
        run,
        options.selection,
        [
            (lambda part: itl_counts_by_class(part, bw, classes_of_run), itl_keys(bw)),
            (lambda part: token_window_query(part, t0, window_ns), ["_w"]),
            (
                lambda part: request_frame(
                    with_expected(part, expected), options.slo, bw, expected=expected is not None
                ),
                None,
            ),
        ],
        columns=READ_COLUMNS,
    )
    if sliced is not None:
        req = sliced[2]
    # The overall percentiles as one group: a group-by sorts each column once for all of
    # its percentiles, where a select would make a selection pass per percentile.
    # A group-by of no rows has no row, which the horizontal concat below cannot pair with
    # the sums' one: a run without rows yet (a live run before its first) takes a select.
    overall_quantiles = (
        req.with_columns(pl.lit(e.ALL).alias("_all"))
        .group_by("_all")
        .agg(request_quantiles(pcts))
        .drop("_all")
        if n
        else req.select(request_quantiles(pcts))
    )
    queries = [
        pl.concat(
            [req.select(pl.lit(e.ALL).alias(e.CLASS), *request_sums()), overall_quantiles],
            how="horizontal",
        )
    ]
    itl_counted = sliced[0] if sliced is not None else itl_counts_by_class(lf, bw, classes_of_run)
    itl = itl_weights(itl_counted, bw)
    queries.append(itl.select(pl.lit(e.ALL).alias(e.CLASS), *itl_aggs))
    if options.by_workload:
        queries.append(req.group_by(e.CLASS).agg(aggs).sort(e.CLASS))
        queries.append(itl.group_by(e.CLASS).agg(itl_aggs))
    queries.append(cache_depth_query(lf))
    per_window = window_queries(lf, req, t0, window_ns)
    if sliced is not None:
        per_window[0] = sliced[1]
    queries.extend(per_window)
    frames = pl.collect_all(queries)
    # the cache query sits after the overall (and per-class) aggregates, before the windows
    cache_by_turn = _cache_depths(frames.pop(4 if options.by_workload else 2))
    overall_row = frames[0].row(0, named=True)
    overall = _class_summary(overall_row, frames[1].row(0, named=True), options)
    classes: tuple[ClassSummary, ...] = ()
    rest = frames[2:]
    if options.by_workload:
        itl_by = {str(r[e.CLASS]): r for r in frames[3].iter_rows(named=True)}
        classes = tuple(
            _class_summary(r, itl_by.get(str(r[e.CLASS])), options)
            for r in frames[2].iter_rows(named=True)
        )
        rest = frames[4:]
    health = run_health(run)
    counted = classes or (overall,)
    lag = overall_row["_lag_p99"]
    validity = assess_validity(
        schedule_lag_p99_ms=float(lag) if lag is not None else None,
        loop_lag_p99_ms=health.loop_lag_p99_ms,
        loop_lag_max_ms=health.loop_lag_max_ms,
        stamp_delay_p99_ms=health.stamp_delay_p99_ms,
        stamp_delay_max_ms=health.stamp_delay_max_ms,
        cap=health.cap,
        stalls=health.stalls,
        sim_slip_p99_ms=_opt(overall_row["_slip_p99"]),
        ttft_p50_ms=_opt(overall_row["_ttft_p50"]),
        cpu_utilisation=health.cpu_utilisation,
        prompt_error_median=overall.fidelity.abs_error_median,
        class_counts=[ClassCount(workload=c.workload, requests=c.ok) for c in counted],
        percentiles=pcts,
        thresholds=options.thresholds,
    )
    del n
    read = RequestPass(
        run=str(run),
        selection=options.selection,
        by_workload=bw,
        requests=req,
        itl_counts=itl_counted,
    )
    analysis = Analysis(
        run=str(run),
        options=options,
        overall=overall,
        classes=classes,
        window_s=window_s,
        windows=windows(list(rest), window_s),
        health=health,
        validity=validity,
        cache_by_turn=cache_by_turn,
        cache_basis=basis,
    )
    return analysis, read


def summarize(run: Path | str, percentiles: tuple[float, ...] = (50.0, 90.0, 99.0)) -> Analysis:
    """The whole-run analysis the end-of-replay table shows (warm-up rows excluded)."""
    return analyze(run, AnalysisOptions(percentiles=percentiles, by_workload=False))


def run_validity(
    run: Path | str,
    lf: pl.LazyFrame,
    *,
    class_counts: list[ClassCount],
    percentiles: tuple[float, ...],
    thresholds: ValidityThresholds,
) -> RunValidity:
    """Validity of already-selected rows ``lf`` of ``run`` (for analyzers other than
    ``analyze``, which computes the same inputs in its own pass)."""
    ok = e.is_ok()
    lag, err, slip, ttft = (
        lf.select(
            e.schedule_lag_ms().quantile(0.99, interpolation="linear").alias("lag"),
            (e.prompt_ratio() - 1).abs().median().alias("err"),
            pl.col(s.SERVER_SLIP_MS).quantile(0.99, interpolation="linear").alias("slip"),
            e.ttft_ms().filter(ok).quantile(0.5, interpolation="linear").alias("ttft"),
        )
        .collect()
        .row(0)
    )
    health = run_health(run)
    return assess_validity(
        schedule_lag_p99_ms=_opt(lag),
        loop_lag_p99_ms=health.loop_lag_p99_ms,
        loop_lag_max_ms=health.loop_lag_max_ms,
        stamp_delay_p99_ms=health.stamp_delay_p99_ms,
        stamp_delay_max_ms=health.stamp_delay_max_ms,
        cap=health.cap,
        stalls=health.stalls,
        sim_slip_p99_ms=_opt(slip),
        ttft_p50_ms=_opt(ttft),
        cpu_utilisation=health.cpu_utilisation,
        prompt_error_median=_opt(err),
        class_counts=class_counts,
        percentiles=percentiles,
        thresholds=thresholds,
    )


def _opt(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None
