"""Named metric expressions over the run table: one ``pl.Expr`` builder per quantity.

Every builder is a formula only: it does not filter by outcome (the caller decides which
requests a metric covers; ``metrics`` reports latencies over ``ok`` requests). Durations are
float milliseconds computed from integer nanoseconds; a null input event gives a null result.
Derived column names are the constants below; run columns come from ``traces.schema``.

Must not import loadgen or httpx.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from analyzers.frames import GAP_US, TOKENS_IN_CHUNK
from traces import schema as s

# Derived per-request columns.
TTFT_MS: Final = "ttft_ms"
TTFT_FROM_DUE_MS: Final = "ttft_from_due_ms"
TTFB_MS: Final = "ttfb_ms"
TTFR_MS: Final = "time_to_first_reasoning_ms"
TPOT_MS: Final = "tpot_ms"
ITL_MS: Final = "itl_ms"
E2E_MS: Final = "e2e_ms"
SCHEDULE_LAG_MS: Final = "schedule_lag_ms"
CONTENT_TOKENS: Final = "content_tokens"
REQUESTED_PROMPT_TOKENS: Final = "requested_prompt_tokens"
PROMPT_RATIO: Final = "prompt_ratio"
CACHED_FRACTION: Final = "cached_fraction"
CLASS: Final = "class"
"""The grouping column of summaries: the workload, or ``ALL`` for the whole run."""
ALL: Final = "all"


def ms_between(later: str, earlier: str) -> pl.Expr:
    """``(later - earlier) / 1e6``: milliseconds between two ``*_ns`` columns; null if either is."""
    return (pl.col(later) - pl.col(earlier)).cast(pl.Float64) / 1e6


def is_ok() -> pl.Expr:
    """True for requests whose outcome is ``ok`` (the stream completed)."""
    return pl.col(s.OUTCOME) == s.OUTCOME_OK


def ttft_ms() -> pl.Expr:
    """Time to first token from send, ms: ``first_token_ns - sent_ns``.

    ``first_token_ns`` is the first *content* chunk: role-only, usage-only and reasoning
    chunks do not count. Null when no content arrived. Excludes the generator's lateness.
    """
    return ms_between(s.FIRST_TOKEN_NS, s.SENT_NS).alias(TTFT_MS)


def ttft_from_due_ms() -> pl.Expr:
    """Time to first token from the scheduled time, ms: ``first_token_ns - due_ns``.

    The coordinated-omission-free TTFT: a late generator makes it grow, as a user's wait
    would. Null when no content arrived.
    """
    return ms_between(s.FIRST_TOKEN_NS, s.DUE_NS).alias(TTFT_FROM_DUE_MS)


def ttfb_ms() -> pl.Expr:
    """Time to first byte, ms: ``first_byte_ns - sent_ns`` (any body bytes, e.g. a role chunk)."""
    return ms_between(s.FIRST_BYTE_NS, s.SENT_NS).alias(TTFB_MS)


def time_to_first_reasoning_ms() -> pl.Expr:
    """Time to first reasoning token, ms: ``first_reasoning_ns - sent_ns``; null for requests
    without reasoning chunks."""
    return ms_between(s.FIRST_REASONING_NS, s.SENT_NS).alias(TTFR_MS)


def e2e_ms() -> pl.Expr:
    """End-to-end latency, ms: ``end_ns - sent_ns`` (stream end, or failure)."""
    return ms_between(s.END_NS, s.SENT_NS).alias(E2E_MS)


def schedule_lag_ms() -> pl.Expr:
    """Schedule lag, ms: ``sent_ns - due_ns``, the generator's lateness (>= 0 normally).

    Null for requests never sent. Large values mean the client, not the server, limited
    the run (see ``validity``).
    """
    return ms_between(s.SENT_NS, s.DUE_NS).alias(SCHEDULE_LAG_MS)


def n_chunks() -> pl.Expr:
    """Content chunks received: ``len(chunk_offsets_us)``."""
    return pl.col(s.CHUNK_OFFSETS_US).list.len().cast(pl.Int64)


def _chunk_tokens_known() -> pl.Expr:
    ct = pl.col(s.CHUNK_TOKENS)
    return ct.is_not_null() & (ct.list.len() == pl.col(s.CHUNK_OFFSETS_US).list.len())


def content_tokens() -> pl.Expr:
    """Content (non-reasoning) output tokens received, tokens.

    ``sum(max(chunk_tokens_i, 1))`` when ``chunk_tokens`` covers every chunk; else
    ``completion_tokens - reasoning_tokens`` from usage; never fewer than the number of
    content chunks (a content chunk carries at least one token); 0 with no chunks.
    """
    m = n_chunks()
    from_chunks = pl.col(s.CHUNK_TOKENS).list.eval(pl.element().fill_null(1).clip(lower_bound=1))
    from_usage = (
        pl.col(s.COMPLETION_TOKENS).cast(pl.Int64)
        - pl.col(s.REASONING_TOKENS).fill_null(0).cast(pl.Int64)
    ).fill_null(m)
    return (
        pl.when(_chunk_tokens_known())
        .then(from_chunks.list.sum().cast(pl.Int64))
        .otherwise(pl.max_horizontal(from_usage, m))
        .alias(CONTENT_TOKENS)
    )


def first_chunk_tokens() -> pl.Expr:
    """Tokens in the first content chunk: ``chunk_tokens[0]`` (at least 1) when recorded,
    else ``floor(content_tokens / chunks)`` (the even spread of ``frames.chunk_frame``)."""
    m = n_chunks()
    known = pl.col(s.CHUNK_TOKENS).list.first().fill_null(1).clip(lower_bound=1).cast(pl.Int64)
    return (
        pl.when(_chunk_tokens_known())
        .then(known)
        .otherwise(pl.when(m > 0).then(content_tokens() // m))
        .alias("first_chunk_tokens")
    )


def tpot_ms() -> pl.Expr:
    """Time per output token after the first chunk, ms/token:
    ``(last chunk arrival - first chunk arrival) / (content_tokens - first_chunk_tokens)``.

    With one token per chunk this is the usual ``(last - first) / (n - 1)``; with chunks of
    several tokens the first chunk's tokens arrive together, so they are not counted as
    decoded in the interval. Equals the token-weighted mean of the request's ITL. Null when
    no token arrived after the first chunk.
    """
    offsets = pl.col(s.CHUNK_OFFSETS_US)
    after_first = content_tokens() - first_chunk_tokens()
    span_ms = (offsets.list.last() - offsets.list.first()).cast(pl.Float64) / 1e3
    return pl.when(after_first > 0).then(span_ms / after_first).alias(TPOT_MS)


def itl_ms() -> pl.Expr:
    """Inter-token latency of each token of a chunk, ms/token, over a ``frames.chunk_frame``:
    ``gap_us / 1e3 / tokens_in_chunk``.

    A chunk of ``k`` tokens stands for ``k`` tokens each ``gap / k`` apart, so percentiles
    weight it ``k`` times (``metrics`` repeats it). Null for a request's first chunk.
    """
    return (pl.col(GAP_US).cast(pl.Float64) / 1e3 / pl.col(TOKENS_IN_CHUNK).cast(pl.Float64)).alias(
        ITL_MS
    )


def requested_prompt_tokens() -> pl.Expr:
    """Prompt tokens the trace asked for: ``input_tokens + image_tokens`` (null image tokens
    count 0), tokens."""
    return (
        pl.col(s.INPUT_TOKENS).cast(pl.Int64) + pl.col(s.IMAGE_TOKENS).fill_null(0).cast(pl.Int64)
    ).alias(REQUESTED_PROMPT_TOKENS)


def prompt_ratio() -> pl.Expr:
    """Prompt fidelity, dimensionless: ``prompt_tokens / requested_prompt_tokens``.

    1.0 is a faithful prompt; null when the server reported no usage or nothing was asked.
    """
    requested = requested_prompt_tokens()
    return (
        pl.when(requested > 0)
        .then(pl.col(s.PROMPT_TOKENS).cast(pl.Float64) / requested)
        .alias(PROMPT_RATIO)
    )


def cached_fraction() -> pl.Expr:
    """Share of the reported prompt served from the prefix cache:
    ``cached_tokens / prompt_tokens``; null without usage or with an empty prompt."""
    prompt = pl.col(s.PROMPT_TOKENS)
    return (
        pl.when(prompt > 0)
        .then(pl.col(s.CACHED_TOKENS).fill_null(0).cast(pl.Float64) / prompt)
        .alias(CACHED_FRACTION)
    )


def uncached_prompt_tokens() -> pl.Expr:
    """Prompt tokens the server had to prefill: ``prompt_tokens - cached_tokens`` (reported
    prompt, else requested), at least 1 (the last prompt token is always computed)."""
    prompt = pl.col(s.PROMPT_TOKENS).cast(pl.Int64).fill_null(requested_prompt_tokens())
    return (
        (prompt - pl.col(s.CACHED_TOKENS).fill_null(0).cast(pl.Int64))
        .clip(lower_bound=1)
        .alias("uncached_prompt_tokens")
    )


def quantile(column: str, percentile: float) -> pl.Expr:
    """Exact percentile of ``column`` (linear interpolation between order statistics, as
    NumPy's default), named ``{column}__p{percentile:g}``; null over no values."""
    return (
        pl.col(column)
        .quantile(percentile / 100, interpolation="linear")
        .alias(f"{column}__p{percentile:g}")
    )


def weighted_quantile(value: str, weight: str, percentile: float) -> pl.Expr:
    """Exact percentile of ``value`` repeated ``weight`` times, without repeating it.

    The same linear interpolation between order statistics as ``quantile``: with ``N`` the
    total weight and ``h = (N - 1) p / 100``, the order statistic of rank ``r`` is the
    first value (ascending) whose cumulative weight exceeds ``r``. Works in a group-by
    context; null over no weight. Used for ITL, where a chunk of ``k`` tokens counts ``k``
    times and equal (gap, k) pairs are counted once.
    """
    v = pl.col(value).sort_by(value)
    cum = pl.col(weight).sort_by(value).cum_sum()
    total = pl.col(weight).sum()
    h = (total - 1).cast(pl.Float64) * (percentile / 100)
    lo = h.floor()
    hi = pl.min_horizontal(lo + 1, total - 1)
    v_lo = v.gather(cum.search_sorted(lo + 1, side="left"), null_on_oob=True)
    v_hi = v.gather(cum.search_sorted(hi + 1, side="left"), null_on_oob=True)
    return (
        pl.when(total > 0)
        .then((v_lo + (h - lo) * (v_hi - v_lo)).first())
        .alias(f"{value}__p{percentile:g}")
    )
