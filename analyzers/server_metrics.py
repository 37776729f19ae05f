"""The server's own view of a run, from its scraped Prometheus samples (server_metrics.parquet).

``server_metrics.parquet`` has one row per sample: ``ts_ns`` (epoch ns, the run's clock),
``name`` (the sample name as exposed: ``..._bucket``, ``..._sum``, ``..._count``,
``..._total`` included), ``labels`` (a JSON object with sorted keys) and ``value``.

Servers name the same quantity differently; each series below lists the names it knows,
first match wins (by sample count):

- requests running: vLLM ``vllm:num_requests_running``, SGLang ``sglang:num_running_reqs``,
  llama.cpp ``llamacpp:requests_processing``, TGI ``tgi_batch_current_size``;
- requests waiting: ``vllm:num_requests_waiting``, ``sglang:num_queue_reqs``,
  ``llamacpp:requests_deferred``, ``tgi_queue_size``;
- KV-cache usage (fraction 0..1): ``vllm:kv_cache_usage_perc`` (``vllm:gpu_cache_usage_perc``
  before vLLM v1), ``sglang:token_usage``.

Cross-checks of the TTFT decomposition: the mean server-side queue time from a queue-time
histogram's ``_sum``/``_count`` deltas over the run (vLLM
``vllm:request_queue_time_seconds``, TGI ``tgi_request_queue_duration``) against the
requests' reported ``server_queue_ms`` or the queue inferred as the remainder; and the total
prefill time from a prefill-seconds counter (llama.cpp ``llamacpp:prompt_seconds_total``,
vLLM ``vllm:request_prefill_time_seconds_sum``) against the sum of ``server_prefill_ms``.

Functions return ``LazyFrame``s; ``summarize_server_metrics`` collects at the edge. Imports
traces and analyzers only; must not import loadgen or httpx.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

import polars as pl

from analyzers.errors import InvalidRunError
from analyzers.frames import run_files, scan_run
from traces import schema as s

TS_NS: Final = s.SM_TS_NS
NAME: Final = s.SM_NAME
LABELS: Final = s.SM_LABELS
VALUE: Final = s.SM_VALUE
T_S: Final = "t_s"
"""Seconds since the first scrape of the run (derived)."""

RUNNING: Final = (
    "vllm:num_requests_running",
    "sglang:num_running_reqs",
    "llamacpp:requests_processing",
    "tgi_batch_current_size",
)
WAITING: Final = (
    "vllm:num_requests_waiting",
    "sglang:num_queue_reqs",
    "llamacpp:requests_deferred",
    "tgi_queue_size",
)
KV_USAGE: Final = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")
QUEUE_HISTOGRAMS: Final = ("vllm:request_queue_time_seconds", "tgi_request_queue_duration")
PREFILL_SECONDS: Final = ("llamacpp:prompt_seconds_total", "vllm:request_prefill_time_seconds_sum")


def metrics_file(run: Path | str) -> Path:
    """The ``server_metrics.parquet`` of a run directory (or the file itself)."""
    path = Path(run)
    return path / s.SERVER_METRICS_FILE if path.is_dir() else path


def scan_server_metrics(run: Path | str) -> pl.LazyFrame:
    """The run's scraped samples; ``InvalidRunError`` when the run has none."""
    path = metrics_file(run)
    if not path.exists():
        raise InvalidRunError(
            f"{path}: no server metrics in this run (the endpoint exposed no /metrics, or "
            "the run used --no-scrape-metrics)"
        )
    return pl.scan_parquet(path)


def _present(lf: pl.LazyFrame, names: tuple[str, ...]) -> str | None:
    """The first of ``names`` with the most samples in ``lf`` (None: none present)."""
    counts = dict(lf.filter(pl.col(NAME).is_in(names)).group_by(NAME).len().collect().iter_rows())
    if not counts:
        return None
    return max(names, key=lambda n: (counts.get(n, 0), -names.index(n)))


def gauge_series(lf: pl.LazyFrame, name: str, *, mean: bool = False) -> pl.LazyFrame:
    """One value per scrape of gauge ``name`` over all label sets: the sum (counts of
    requests across engines) or, with ``mean``, the mean (usage fractions).
    Columns ``ts_ns``, ``t_s`` (s since the run's first scrape), ``value``; sorted by time."""
    first = pl.col(TS_NS).min()
    agg = pl.col(VALUE).mean() if mean else pl.col(VALUE).sum()
    per_scrape = lf.filter(pl.col(NAME) == name).group_by(TS_NS).agg(agg.alias(VALUE))
    return (
        per_scrape.join(lf.select(first.alias("_t0")), how="cross")
        .select(
            pl.col(TS_NS),
            ((pl.col(TS_NS) - pl.col("_t0")).cast(pl.Float64) / 1e9).alias(T_S),
            pl.col(VALUE),
        )
        .sort(TS_NS)
    )


def requests_running(lf: pl.LazyFrame) -> pl.LazyFrame | None:
    """Requests in the running batch over time (None: the server exposes no such gauge)."""
    name = _present(lf, RUNNING)
    return gauge_series(lf, name) if name else None


def requests_waiting(lf: pl.LazyFrame) -> pl.LazyFrame | None:
    """Requests waiting for admission over time (None: no such gauge)."""
    name = _present(lf, WAITING)
    return gauge_series(lf, name) if name else None


def kv_cache_usage(lf: pl.LazyFrame) -> pl.LazyFrame | None:
    """KV-cache usage, a fraction in 0..1 averaged over engines (None: no such gauge)."""
    name = _present(lf, KV_USAGE)
    return gauge_series(lf, name, mean=True) if name else None


def counter_delta(lf: pl.LazyFrame, name: str) -> pl.LazyFrame:
    """Increase of counter sample ``name`` over the run: last minus first value per label
    set, summed (a counter reset mid-run makes it wrong; servers do not reset while up).
    One row, column ``value``; null when the sample is absent."""
    per_labels = (
        lf.filter(pl.col(NAME) == name)
        .sort(TS_NS)
        .group_by(LABELS)
        .agg((pl.col(VALUE).last() - pl.col(VALUE).first()).alias(VALUE))
    )
    return per_labels.select(
        pl.when(pl.len() > 0).then(pl.col(VALUE).sum()).otherwise(None).alias(VALUE)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SeriesStats:
    """A gauge over the run: its sample name, scrapes, mean and max."""

    name: str
    scrapes: int
    mean: float
    max: float


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueCheck:
    """Mean server-side queue time from the histogram vs the requests' view, ms.

    ``histogram_mean_ms`` = delta(``_sum``) / delta(``_count``) x 1000 over the run;
    ``reported_mean_ms``: mean ``server_queue_ms`` of ok requests (when the server sends
    it); ``remainder_mean_ms``: mean of ``first_token - request_written - server prefill -
    server first token`` (the queue plus the network, when the server reports prefill)."""

    histogram: str | None
    histogram_requests: float | None
    histogram_mean_ms: float | None
    reported_mean_ms: float | None
    remainder_mean_ms: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefillCheck:
    """Total prefill time by the server's counter vs the sum of per-request prefill, ms."""

    counter: str
    counter_total_ms: float
    requests_total_ms: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerMetricsSummary:
    """What ``loadgen server-metrics`` prints."""

    samples: int
    scrapes: int
    duration_s: float
    running: SeriesStats | None
    waiting: SeriesStats | None
    kv_usage: SeriesStats | None
    queue: QueueCheck
    prefill: PrefillCheck | None


def _stats(lf: pl.LazyFrame, names: tuple[str, ...], *, mean: bool = False) -> SeriesStats | None:
    name = _present(lf, names)
    if name is None:
        return None
    row = (
        gauge_series(lf, name, mean=mean)
        .select(pl.len().alias("n"), pl.col(VALUE).mean().alias("m"), pl.col(VALUE).max())
        .collect()
        .row(0)
    )
    return SeriesStats(name=name, scrapes=int(row[0]), mean=float(row[1]), max=float(row[2]))


def _delta(lf: pl.LazyFrame, name: str) -> float | None:
    value = counter_delta(lf, name).collect().item()
    return float(value) if value is not None else None


def queue_histogram_mean_ms(lf: pl.LazyFrame) -> tuple[str | None, float | None, float | None]:
    """``(histogram, requests observed, mean queue ms)`` from the first queue-time
    histogram present, differenced over the run; Nones when none is present or it saw no
    request."""
    for hist in QUEUE_HISTOGRAMS:
        count = _delta(lf, f"{hist}_count")
        total = _delta(lf, f"{hist}_sum")
        if count is None or total is None:
            continue
        return hist, count, (total / count * 1e3 if count > 0 else None)
    return None, None, None


def _request_queue_means(run: Path | str) -> tuple[float | None, float | None]:
    ok = scan_run(run).filter(pl.col(s.OUTCOME) == s.OUTCOME_OK)
    after_write = (pl.col(s.FIRST_TOKEN_NS) - pl.col(s.REQUEST_WRITTEN_NS)).cast(pl.Float64) / 1e6
    remainder = (
        after_write
        - pl.col(s.SERVER_PREFILL_MS)
        - pl.col(s.SERVER_TRANSFER_MS).fill_null(0.0)
        - pl.col(s.SERVER_DECODE_WAIT_MS).fill_null(0.0)
        - pl.col(s.SERVER_FIRST_TOKEN_MS).fill_null(0.0)
    )
    row = ok.select(
        pl.col(s.SERVER_QUEUE_MS).mean().alias("reported"), remainder.mean().alias("remainder")
    ).collect()
    if row.height == 0:
        return None, None
    reported, rem = row.row(0)
    return (
        float(reported) if reported is not None else None,
        float(rem) if rem is not None else None,
    )


def _requests_prefill_total_ms(run: Path | str) -> float | None:
    total = scan_run(run).select(pl.col(s.SERVER_PREFILL_MS).sum()).collect().item()
    count = scan_run(run).select(pl.col(s.SERVER_PREFILL_MS).count()).collect().item()
    return float(total) if count else None


def summarize_server_metrics(run: Path | str) -> ServerMetricsSummary:
    """Series statistics and the cross-checks of one run (reads requests too, if any)."""
    lf = scan_server_metrics(run)
    head = lf.select(
        pl.len().alias("n"),
        pl.col(TS_NS).n_unique().alias("scrapes"),
        ((pl.col(TS_NS).max() - pl.col(TS_NS).min()).cast(pl.Float64) / 1e9).alias("span"),
    ).collect()
    samples, scrapes, span = head.row(0)
    has_requests = Path(run).is_dir() and bool(run_files(run))
    hist, hist_n, hist_mean = queue_histogram_mean_ms(lf)
    reported, remainder = _request_queue_means(run) if has_requests else (None, None)
    prefill: PrefillCheck | None = None
    for counter in PREFILL_SECONDS:
        seconds = _delta(lf, counter)
        if seconds is not None:
            prefill = PrefillCheck(
                counter=counter,
                counter_total_ms=seconds * 1e3,
                requests_total_ms=_requests_prefill_total_ms(run) if has_requests else None,
            )
            break
    return ServerMetricsSummary(
        samples=int(samples),
        scrapes=int(scrapes),
        duration_s=float(span or 0.0),
        running=_stats(lf, RUNNING),
        waiting=_stats(lf, WAITING),
        kv_usage=_stats(lf, KV_USAGE, mean=True),
        queue=QueueCheck(
            histogram=hist,
            histogram_requests=hist_n,
            histogram_mean_ms=hist_mean,
            reported_mean_ms=reported,
            remainder_mean_ms=remainder,
        ),
        prefill=prefill,
    )


def timeline(run: Path | str, *, bucket_s: float = 1.0) -> pl.DataFrame:
    """Running, waiting and KV usage per ``bucket_s`` of the run (max within the bucket);
    columns ``t_s``, ``running``, ``waiting``, ``kv_usage`` (null when not exposed)."""
    lf = scan_server_metrics(run)
    parts: list[tuple[str, pl.LazyFrame | None]] = [
        ("running", requests_running(lf)),
        ("waiting", requests_waiting(lf)),
        ("kv_usage", kv_cache_usage(lf)),
    ]
    bucket = (pl.col(T_S) / bucket_s).floor() * bucket_s
    out: pl.LazyFrame | None = None
    for column, series in parts:
        if series is None:
            continue
        binned = series.group_by(bucket.alias(T_S)).agg(pl.col(VALUE).max().alias(column))
        out = binned if out is None else out.join(binned, on=T_S, how="full", coalesce=True)
    if out is None:
        return pl.DataFrame({T_S: []}, schema={T_S: pl.Float64})
    frame = out.sort(T_S).collect()
    for column, _ in parts:
        if column not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=pl.Float64).alias(column))
    return frame.select(T_S, "running", "waiting", "kv_usage")
