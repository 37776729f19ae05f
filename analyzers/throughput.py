"""Throughput over time: fixed windows of arrivals, completions and token rates.

``auto_window_s`` picks a round window length for a run's span; ``window_queries`` builds
the lazy per-window sums that ``metrics.analyze`` collects with its other aggregations, and
``windows`` turns the collected frames into ``ThroughputWindow`` values. Windows start at
the run's first due time. Must not import loadgen or httpx.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import polars as pl

from analyzers.chunk_sums import window_tokens
from traces import schema as s

_NICE_WINDOWS: Final = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0)


def auto_window_s(duration_s: float, windows: int = 30) -> float:
    """The smallest of 0.1, 0.2, 0.5, 1, 2, 5, ... s giving at most ``windows`` windows."""
    for w in _NICE_WINDOWS:
        if duration_s / w <= windows:
            return w
    return math.ceil(duration_s / windows / 600.0) * 600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ThroughputWindow:
    """One time window ``[start_s, end_s)`` from the first due time.

    ``arrivals``: requests due in it; ``completed``: ok requests ending in it;
    ``output_tokens``: content tokens arriving in it; ``total_tokens_per_s`` adds the prompt
    tokens of ok requests whose first token arrived in it.
    """

    start_s: float
    end_s: float
    arrivals: int
    completed: int
    output_tokens: int
    output_tokens_per_s: float
    total_tokens_per_s: float
    requests_per_s: float


def token_window_query(lf: pl.LazyFrame, t0: int, window_ns: int) -> pl.LazyFrame:
    """Content tokens arriving per window (``_w``, ``_tokens``), from ``lf``'s chunks."""
    return window_tokens(lf, t0, window_ns)


def window_queries(
    lf: pl.LazyFrame, req: pl.LazyFrame, t0: int, window_ns: int
) -> list[pl.LazyFrame]:
    """Per-window sums, window index ``_w`` from ``t0`` in ``window_ns`` steps: content
    tokens arriving (from ``lf``'s chunks), requests due, ok requests ending and the prompt
    tokens of ok requests whose first token arrived, or without one whose end came (from
    ``req``, ``metrics.request_frame``'s rows: its ``_ok`` and ``_ok_prompt`` columns).
    Collect them, in this order, for ``windows``."""

    def idx(col: str) -> pl.Expr:
        return ((pl.col(col) - t0) // window_ns).alias("_w")

    tokens = token_window_query(lf, t0, window_ns)
    arrivals = req.group_by(idx(s.DUE_NS)).agg(pl.len().cast(pl.Int64).alias("_arrivals"))
    completed = (
        req.filter(pl.col("_ok"))
        .group_by(idx(s.END_NS))
        .agg(pl.len().cast(pl.Int64).alias("_completed"))
    )
    # An ok request without a first token (embeddings: nothing streams) counts its prompt
    # at its end.
    prompted = pl.coalesce(s.FIRST_TOKEN_NS, s.END_NS)
    prompts = (
        req.filter(pl.col("_ok"))
        .group_by(((prompted - t0) // window_ns).alias("_w"))
        .agg(pl.col("_ok_prompt").sum().cast(pl.Int64).alias("_prompt"))
    )
    return [tokens, arrivals, completed, prompts]


def windows(frames: list[pl.DataFrame], window_s: float) -> tuple[ThroughputWindow, ...]:
    """The windows from ``window_queries``' collected frames: every window from ``t0`` up
    to the last with data (empty ones as zeros; anything before ``t0`` is dropped)."""
    merged: dict[int, list[int]] = {}
    for slot, frame in enumerate(frames):
        for w, value in frame.iter_rows():
            if w is None or w < 0:
                continue
            merged.setdefault(int(w), [0, 0, 0, 0])[slot] += int(value or 0)
    out = []
    for w in range(max(merged) + 1 if merged else 0):
        tokens, arrivals, completed, prompt = merged.get(w, [0, 0, 0, 0])
        out.append(
            ThroughputWindow(
                start_s=w * window_s,
                end_s=(w + 1) * window_s,
                arrivals=arrivals,
                completed=completed,
                output_tokens=tokens,
                output_tokens_per_s=tokens / window_s,
                total_tokens_per_s=(tokens + prompt) / window_s,
                requests_per_s=completed / window_s,
            )
        )
    return tuple(out)
