"""The per-request frame of a run and its aggregations: one row per request with its
metric columns (latencies null unless ``ok``), ``CLASS`` and goodput flags
(``request_frame``), the run columns it reads (``READ_COLUMNS``) and the aggregations
``analyzers.metrics`` collects over it (``request_aggs``, ``compared_aggs``).

Definitions of the columns are the builders' docstrings in ``analyzers.exprs``. Like the
rest of ``analyzers``, it stays clear of the client (``loadgen``, ``httpx``).
"""

from __future__ import annotations

from typing import Final

import polars as pl

from analyzers import exprs as e
from analyzers import goodput as g
from analyzers.analysis import REQUEST_METRICS
from analyzers.cache import EXPECTED_CACHED
from traces import schema as s

__all__ = [
    "OUTCOME_OTHER",
    "READ_COLUMNS",
    "compared_aggs",
    "request_aggs",
    "request_frame",
    "request_quantiles",
    "request_sums",
    "with_expected",
]

OUTCOME_OTHER: Final = "other"
"""The outcome bucket of rows whose ``outcome`` is none of ``traces.schema.OUTCOMES``."""


READ_COLUMNS: Final = (
    s.REQUEST_ID,
    s.WORKLOAD,
    s.OUTCOME,
    s.DUE_NS,
    s.SENT_NS,
    s.FIRST_BYTE_NS,
    s.FIRST_TOKEN_NS,
    s.FIRST_REASONING_NS,
    s.END_NS,
    s.CHUNK_OFFSETS_US,
    s.CHUNK_TOKENS,
    s.COMPLETION_TOKENS,
    s.REASONING_TOKENS,
    s.PROMPT_TOKENS,
    s.INPUT_TOKENS,
    s.IMAGE_TOKENS,
    s.CACHED_TOKENS,
    s.SERVER_SLIP_MS,
    s.SLO_TTFT_MS,
    s.SLO_TPOT_MS,
    s.TRACE_INDEX,
    s.API,
    s.ITEMS,
    s.TOOL_CALL_CHUNKS,
)
"""The run columns ``request_frame``, ``itl_counts_by_class`` and ``token_window_query`` read
(``frames.chunk_frame`` names ``REQUEST_ID``)."""


def request_frame(
    lf: pl.LazyFrame, slo: g.SLOTargets, by_workload: bool, *, expected: bool = False
) -> pl.LazyFrame:
    """Per-request metric columns (latencies null unless ok), ``CLASS`` and goodput flags;
    ``EXPECTED_CACHED`` from ``lf`` when ``expected`` (it holds the column), else null."""
    ok = e.is_ok()
    masked = [
        pl.when(ok).then(expr)
        for expr in (
            e.ttft_ms(),
            e.ttft_from_due_ms(),
            e.ttfb_ms(),
            e.time_to_first_reasoning_ms(),
            e.tpot_ms(),
            e.e2e_ms(),
        )
    ]
    prompt = pl.col(s.PROMPT_TOKENS).cast(pl.Int64)
    return lf.select(
        (pl.col(s.WORKLOAD) if by_workload else pl.lit(e.ALL)).cast(pl.String).alias(e.CLASS),
        pl.col(s.OUTCOME),
        ok.alias("_ok"),
        pl.col(s.DUE_NS),
        pl.col(s.SENT_NS),
        pl.col(s.FIRST_TOKEN_NS),
        pl.col(s.END_NS),
        *[m.alias(name) for m, name in zip(masked, _masked_names(), strict=True)],
        e.schedule_lag_ms(),
        e.content_tokens(),
        pl.when(ok).then(prompt.fill_null(e.requested_prompt_tokens())).alias("_ok_prompt"),
        e.requested_prompt_tokens(),
        prompt.alias(s.PROMPT_TOKENS),
        e.prompt_ratio(),
        pl.col(s.CACHED_TOKENS).cast(pl.Int64),
        e.cached_fraction(),
        _expected_column(expected),
        pl.col(s.SERVER_SLIP_MS),
        pl.when(ok).then(pl.col(s.ITEMS).cast(pl.Int64)).alias("_ok_items"),
        (pl.col(s.API).cast(pl.String) == s.API_EMBEDDINGS).alias("_embed"),
        (ok & pl.col(s.TOOL_CALL_CHUNKS).is_not_null()).alias("_tool_known"),
        (ok & (pl.col(s.TOOL_CALL_CHUNKS) > 0)).fill_null(False).alias("_tool"),
        *g.goodput_columns(slo),
    )


def with_expected(lf: pl.LazyFrame, expected: pl.DataFrame | None) -> pl.LazyFrame:
    """``lf`` with the expected cached tokens per request (``EXPECTED_CACHED``) joined on
    the trace index, when there are any."""
    if expected is None:
        return lf
    return lf.join(expected.lazy(), on=s.TRACE_INDEX, how="left", maintain_order="left")


def _expected_column(expected: bool) -> pl.Expr:
    col = pl.col(EXPECTED_CACHED) if expected else pl.lit(None, dtype=pl.Int64)
    return col.alias(EXPECTED_CACHED)


def compared_aggs(prompt: pl.Expr) -> list[pl.Expr]:
    """Sums over the requests with a reported prompt and an expectation (``_cmp_*``)."""
    both = (prompt > 0) & pl.col(EXPECTED_CACHED).is_not_null()
    return [
        both.sum().alias("_cmp_n"),
        prompt.filter(both).sum().alias("_cmp_prompt"),
        pl.col(EXPECTED_CACHED).filter(both).sum().alias("_cmp_exp"),
        pl.col(s.CACHED_TOKENS).filter(both).fill_null(0).sum().alias("_cmp_obs"),
    ]


def _masked_names() -> tuple[str, ...]:
    return (e.TTFT_MS, e.TTFT_FROM_DUE_MS, e.TTFB_MS, e.TTFR_MS, e.TPOT_MS, e.E2E_MS)


def _stat_aggs(column: str) -> list[pl.Expr]:
    c = pl.col(column)
    return [
        c.count().alias(f"{column}__count"),
        c.mean().alias(f"{column}__mean"),
        c.max().cast(pl.Float64).alias(f"{column}__max"),
    ]


def request_aggs(percentiles: tuple[float, ...]) -> list[pl.Expr]:
    """Every aggregation of a class's requests: ``request_sums`` then
    ``request_quantiles``."""
    return [*request_sums(), *request_quantiles(percentiles)]


def request_quantiles(percentiles: tuple[float, ...]) -> list[pl.Expr]:
    """The order statistics of a class's requests (percentiles and medians). Over a whole
    frame, each costs a selection pass of its own in a ``select``; in a ``group_by`` one
    sort per column serves all of a column's: ``metrics`` takes them by group."""
    ratio = pl.col(e.PROMPT_RATIO)
    aggs = [
        ratio.median().alias("_fid_ratio"),
        (ratio - 1).abs().median().alias("_fid_err"),
        e.quantile(e.SCHEDULE_LAG_MS, 99.0).alias("_lag_p99"),
        e.quantile(s.SERVER_SLIP_MS, 99.0).alias("_slip_p99"),
        e.quantile(e.TTFT_MS, 50.0).alias("_ttft_p50"),
    ]
    for m in REQUEST_METRICS:
        aggs.extend(e.quantile(m.key, p) for p in percentiles)
    return aggs


def request_sums() -> list[pl.Expr]:
    """The counts, sums, means and maxima of a class's requests."""
    outcome = pl.col(s.OUTCOME)
    ratio = pl.col(e.PROMPT_RATIO)
    has_usage = pl.col(s.PROMPT_TOKENS).is_not_null()
    has_prompt = pl.col(s.PROMPT_TOKENS) > 0
    aggs = [
        pl.len().alias("_n"),
        pl.col("_ok").sum().alias("_ok"),
        *((outcome == o).sum().alias(f"_outcome_{o}") for o in s.OUTCOMES),
        (~outcome.is_in(list(s.OUTCOMES))).sum().alias(f"_outcome_{OUTCOME_OTHER}"),
        pl.col(s.SENT_NS).min().alias("_first_sent"),
        pl.col(s.END_NS).max().alias("_last_end"),
        pl.col(e.CONTENT_TOKENS).sum().alias("_out_tokens"),
        pl.col("_ok_prompt").sum().alias("_ok_prompt"),
        pl.col("_ok_items").sum().alias("_ok_items"),
        pl.col("_embed").sum().alias("_embed"),
        pl.col("_tool_known").sum().alias("_tool_known"),
        pl.col("_tool").sum().alias("_tool_n"),
        pl.col(e.CONTENT_TOKENS).filter(pl.col("_tool")).sum().alias("_tool_tokens"),
        ratio.count().alias("_fid_n"),
        pl.col(e.REQUESTED_PROMPT_TOKENS).filter(has_usage).mean().alias("_fid_req"),
        pl.col(s.PROMPT_TOKENS).mean().alias("_fid_rep"),
        pl.col(s.CACHED_TOKENS).filter(has_usage).mean().alias("_cached"),
        pl.col(e.CACHED_FRACTION).mean().alias("_cached_frac"),
        pl.col(s.CACHED_TOKENS).filter(has_prompt).fill_null(0).sum().alias("_cached_sum"),
        pl.col(s.PROMPT_TOKENS).filter(has_prompt).sum().alias("_prompt_sum"),
        pl.col(s.CACHED_TOKENS).filter(has_usage).count().alias("_cached_n"),
        *compared_aggs(pl.col(s.PROMPT_TOKENS).cast(pl.Int64)),
        *g.goodput_aggs(),
    ]
    for m in REQUEST_METRICS:
        aggs.extend(_stat_aggs(m.key))
    return aggs
