"""Run summaries: latency percentiles, throughput and outcome counts, from Polars.

Definitions (all per request, over requests whose outcome is ``ok``):
- TTFT (ms): first content chunk arrival - sent.
- TTFT from due (ms): first content chunk arrival - due (includes generator lateness).
- E2E (ms): end - sent.
- TPOT (ms/token): (last content chunk - first content chunk) / (output tokens - 1), output
  tokens being the server's ``completion_tokens`` (else the chunk count); undefined for 1.
- ITL (ms): gap between consecutive content chunks divided by the tokens of the later
  chunk when known (a chunk of k tokens counts as k tokens).
Must not import loadgen or httpx.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from analyzers.frames import scan_run
from traces import schema as s

DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricRow:
    """Percentiles of one latency metric, in ``unit``."""

    name: str
    unit: str
    count: int
    mean: float | None
    percentiles: tuple[tuple[float, float | None], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSummary:
    """What the end-of-run table shows."""

    requests: int
    ok: int
    by_outcome: tuple[tuple[str, int], ...]
    duration_s: float
    output_tokens: int
    output_tokens_per_s: float
    requests_per_s: float
    metrics: tuple[MetricRow, ...]


def _ms(a: str, b: str) -> pl.Expr:
    return (pl.col(a) - pl.col(b)) / 1e6


def _row(
    frame: pl.DataFrame, column: str, name: str, unit: str, percentiles: tuple[float, ...]
) -> MetricRow:
    series = frame.get_column(column).drop_nulls()
    if series.len() == 0:
        return MetricRow(
            name=name,
            unit=unit,
            count=0,
            mean=None,
            percentiles=tuple((p, None) for p in percentiles),
        )
    values = tuple(
        (p, float(series.quantile(p / 100, interpolation="linear") or 0.0)) for p in percentiles
    )
    mean = series.mean()
    return MetricRow(
        name=name,
        unit=unit,
        count=series.len(),
        mean=float(mean) if isinstance(mean, int | float) else None,
        percentiles=values,
    )


def summarize(run: Path | str, percentiles: tuple[float, ...] = DEFAULT_PERCENTILES) -> RunSummary:
    """Summarize a run directory (warm-up rows excluded)."""
    lf = scan_run(run).filter(~pl.col(s.WARMUP))
    offsets = pl.col(s.CHUNK_OFFSETS_US)
    n_chunks = offsets.list.len()
    out_tokens = pl.coalesce(pl.col(s.COMPLETION_TOKENS), n_chunks.cast(pl.Int32))
    per_request = lf.select(
        pl.col(s.OUTCOME),
        pl.col(s.SENT_NS),
        pl.col(s.END_NS),
        out_tokens.alias("out_tokens"),
        pl.when(pl.col(s.OUTCOME) == s.OUTCOME_OK)
        .then(_ms(s.FIRST_TOKEN_NS, s.SENT_NS))
        .alias("ttft_ms"),
        pl.when(pl.col(s.OUTCOME) == s.OUTCOME_OK)
        .then(_ms(s.FIRST_TOKEN_NS, s.DUE_NS))
        .alias("ttft_due_ms"),
        pl.when(pl.col(s.OUTCOME) == s.OUTCOME_OK).then(_ms(s.END_NS, s.SENT_NS)).alias("e2e_ms"),
        pl.when((pl.col(s.OUTCOME) == s.OUTCOME_OK) & (out_tokens > 1))
        .then((offsets.list.last() - offsets.list.first()) / 1e3 / (out_tokens - 1))
        .alias("tpot_ms"),
        _ms(s.SENT_NS, s.DUE_NS).alias("lag_ms"),
    ).collect()
    itl = (
        lf.filter(pl.col(s.OUTCOME) == s.OUTCOME_OK)
        .select(
            offsets.list.diff().list.slice(1).alias("gap"),
            pl.when(pl.col(s.CHUNK_TOKENS).is_not_null())
            .then(pl.col(s.CHUNK_TOKENS).list.slice(1))
            .otherwise(offsets.list.slice(1).list.eval(pl.lit(1, dtype=pl.Int16)))
            .alias("k"),
        )
        .explode(["gap", "k"])
        .select((pl.col("gap") / 1e3 / pl.col("k").clip(lower_bound=1)).alias("itl_ms"))
        .collect()
    )
    counts = per_request.group_by(s.OUTCOME).len().sort(s.OUTCOME)
    by_outcome = tuple((str(o), int(n)) for o, n in counts.iter_rows())
    ok = dict(by_outcome).get(s.OUTCOME_OK, 0)
    start = per_request.get_column(s.SENT_NS).min()
    end = per_request.get_column(s.END_NS).max()
    duration = ((end - start) / 1e9) if isinstance(start, int) and isinstance(end, int) else 0.0
    ok_tokens = per_request.filter(pl.col(s.OUTCOME) == s.OUTCOME_OK).get_column("out_tokens").sum()
    output_tokens = int(ok_tokens or 0)
    rows = (
        _row(per_request, "ttft_ms", "TTFT", "ms", percentiles),
        _row(per_request, "ttft_due_ms", "TTFT from due", "ms", percentiles),
        _row(per_request, "tpot_ms", "TPOT", "ms", percentiles),
        _row(itl, "itl_ms", "ITL", "ms", percentiles),
        _row(per_request, "e2e_ms", "E2E", "ms", percentiles),
        _row(per_request, "lag_ms", "Schedule lag", "ms", percentiles),
    )
    return RunSummary(
        requests=per_request.height,
        ok=ok,
        by_outcome=by_outcome,
        duration_s=duration,
        output_tokens=output_tokens,
        output_tokens_per_s=output_tokens / duration if duration > 0 else 0.0,
        requests_per_s=ok / duration if duration > 0 else 0.0,
        metrics=rows,
    )
