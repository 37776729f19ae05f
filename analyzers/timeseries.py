"""Chart series of a run: bounded-size distributions and time series for reports.

``run_series(run, options)`` returns a ``RunSeries`` whose size does not grow with the run:

- ``cdfs``: the empirical CDF of TTFT, TTFT from due, TPOT and E2E per workload class (and
  the run, ``exprs.ALL``), at the order statistics nearest a fixed probability grid that is
  dense in the tail (p0..p99 in 1% steps, then up to p99.999 on a log scale, then the max);
  each point is an exact sample value ``v`` and ``F(v) = rank / n``.
- ``windows``: fixed windows of due/send time from the first due time: offered load
  (requests due per second), completions per second, the in-flight count (its maximum in
  the window and its level at the window's end: sent at or before minus ended at or before),
  and per metric the p50 and p99 over the requests *sent* in the window.
- ``samples``: a deterministic sample of requests (every ``k``-th in send order, at most
  ``max_points``) with send time and latencies, for scatter plots.
- ``itl``: the ITL histogram per class on log-spaced bins, weighted by tokens (a chunk of
  ``k`` tokens counts ``k`` times, as in ``metrics``).
- ``fidelity``: sampled (requested, reported) prompt tokens of requests with usage.

Latencies are over ``ok`` requests, as in ``metrics``; offered load and in-flight count
over every selected request. Must not import loadgen or httpx.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import polars as pl

from analyzers import exprs as e
from analyzers.chunk_sums import COUNT, RequestPass, itl_counts_by_class, itl_keys, workloads
from analyzers.frames import GAP_US, TOKENS_IN_CHUNK, RowSelection, scan_run, summed_in_slices
from analyzers.frames import select_rows as apply_selection
from analyzers.goodput import SLOTargets
from analyzers.metrics import READ_COLUMNS, request_frame
from analyzers.throughput import auto_window_s
from traces import schema as s

CDF_METRICS: Final = (e.TTFT_MS, e.TTFT_FROM_DUE_MS, e.TPOT_MS, e.E2E_MS)
"""Metrics whose CDFs and windowed percentiles ``run_series`` computes (all in ms)."""

_SEND_S: Final = "_send_s"


@dataclass(frozen=True, slots=True, kw_only=True)
class SeriesOptions:
    """What ``run_series`` computes. ``windows``: at most this many time windows, and no
    more than one per ``requests_per_window`` requests (so that a window's p99 rests on a
    few requests), at least 10; ``window_s`` overrides both. ``max_points``: the sample
    cap; ``itl_bins_per_decade``: the ITL histogram's resolution."""

    selection: RowSelection = field(default_factory=RowSelection)
    by_workload: bool = True
    windows: int = 120
    requests_per_window: int = 10
    window_s: float | None = None
    max_points: int = 1500
    itl_bins_per_decade: int = 12


@dataclass(frozen=True, slots=True, kw_only=True)
class Cdf:
    """Empirical CDF of ``metric`` (ms) over ``count`` ok requests of ``workload``:
    ``fractions[i]`` of them took at most ``values_ms[i]``. Empty when ``count`` is 0."""

    workload: str
    metric: str
    count: int
    values_ms: tuple[float, ...]
    fractions: tuple[float, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricWindows:
    """Per window: p50 and p99 (ms) of ``metric`` over the ok requests sent in it (None:
    none sent)."""

    metric: str
    p50_ms: tuple[float | None, ...]
    p99_ms: tuple[float | None, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Windows:
    """Time windows ``[start_s[i], start_s[i] + window_s)`` from the first due time."""

    window_s: float
    start_s: tuple[float, ...]
    offered_per_s: tuple[float, ...]
    completed_per_s: tuple[float, ...]
    in_flight_max: tuple[int, ...]
    in_flight_end: tuple[int, ...]
    metrics: tuple[MetricWindows, ...]

    def metric(self, key: str) -> MetricWindows:
        """The windowed percentiles of ``key``."""
        for m in self.metrics:
            if m.metric == key:
                return m
        raise KeyError(key)


@dataclass(frozen=True, slots=True, kw_only=True)
class Samples:
    """Every ``every``-th request in send order (of ``total``): its class, send time (s
    from the first due time) and latencies (ms; None unless ok)."""

    total: int
    every: int
    workload: tuple[str, ...]
    send_s: tuple[float, ...]
    ttft_ms: tuple[float | None, ...]
    tpot_ms: tuple[float | None, ...]
    e2e_ms: tuple[float | None, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Histogram:
    """Token-weighted ITL histogram of ``workload``: ``weights[i]`` tokens arrived
    ``edges_ms[i]`` to ``edges_ms[i + 1]`` ms after the previous one (gaps below the first
    edge, zero included, count in the first bin)."""

    workload: str
    edges_ms: tuple[float, ...]
    weights: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class FidelitySamples:
    """Sampled requests with usage: requested (trace) and reported (server) prompt tokens."""

    total: int
    workload: tuple[str, ...]
    requested: tuple[int, ...]
    reported: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSeries:
    """The result of ``run_series`` (see the module docstring); ``classes``: the workload
    classes in name order (empty without ``by_workload``)."""

    run: str
    classes: tuple[str, ...]
    cdfs: tuple[Cdf, ...]
    windows: Windows
    samples: Samples
    itl: tuple[Histogram, ...]
    fidelity: FidelitySamples

    def cdf(self, workload: str, metric: str) -> Cdf:
        """The CDF of ``metric`` for ``workload`` (``exprs.ALL``: the run)."""
        for c in self.cdfs:
            if c.workload == workload and c.metric == metric:
                return c
        raise KeyError((workload, metric))


def probability_grid() -> tuple[float, ...]:
    """CDF probabilities: 0 to 0.99 in steps of 0.01, then ``1 - 10^-x`` for ``x`` from 2 to
    5 in steps of 0.1 (p99 to p99.999), then 1."""
    body = [i / 100 for i in range(100)]
    tail = [1 - 10 ** -(2 + i / 10) for i in range(31)]
    return (*body, *tail, 1.0)


def cdf_indices(n: int) -> list[int]:
    """Distinct order-statistic indices (0-based, ascending) nearest the probability grid
    for ``n`` samples; always includes the minimum and the maximum."""
    if n <= 0:
        return []
    return sorted({min(n - 1, max(0, round(p * (n - 1)))) for p in probability_grid()})


def _cdf(workload: str, metric: str, values: pl.Series) -> Cdf:
    v = values.drop_nulls().sort()
    n = v.len()
    idx = cdf_indices(n)
    picked = v.gather(idx).cast(pl.Float64).to_list() if idx else []
    return Cdf(
        workload=workload,
        metric=metric,
        count=n,
        values_ms=tuple(float(x) for x in picked),
        fractions=tuple((i + 1) / n for i in idx),
    )


def _windows(req: pl.DataFrame, t0: int, window_s: float) -> Windows:
    w_ns = max(1, int(window_s * 1e9))
    sent = req.get_column(s.SENT_NS).drop_nulls()
    last = max(
        int(req.get_column(s.DUE_NS).max() or t0),  # type: ignore[arg-type]
        int(req.get_column(s.END_NS).max() or t0),  # type: ignore[arg-type]
    )
    count = max(1, (last - t0) // w_ns + 1)
    starts = [t0 + i * w_ns for i in range(count)]
    due_w = req.select(((pl.col(s.DUE_NS) - t0) // w_ns).alias("_w")).get_column("_w")
    offered = [0] * count
    for w, n in due_w.value_counts().iter_rows():
        if w is not None and 0 <= w < count:
            offered[int(w)] = int(n)
    ok = req.filter(pl.col("_ok"))
    done = [0] * count
    end_w = ok.select(((pl.col(s.END_NS) - t0) // w_ns).alias("_w")).get_column("_w")
    for w, n in end_w.value_counts().iter_rows():
        if w is not None and 0 <= w < count:
            done[int(w)] = int(n)
    # In flight: +1 at send, -1 at end; a request that never ended stays in flight.
    events = (
        pl.concat(
            [
                pl.DataFrame({"t": sent, "d": pl.repeat(1, sent.len(), eager=True)}),
                pl.DataFrame(
                    {
                        "t": req.filter(pl.col(s.SENT_NS).is_not_null())
                        .get_column(s.END_NS)
                        .drop_nulls(),
                    }
                ).with_columns(pl.lit(-1).alias("d")),
            ],
            how="vertical_relaxed",
        )
        # Ends before sends at equal times: a request replaced at the same instant is not
        # counted twice.
        .sort(["t", "d"])
        .with_columns(pl.col("d").cum_sum().alias("level"), ((pl.col("t") - t0) // w_ns).alias("w"))
    )
    per_window = {
        int(w): (int(mx), int(lv))
        for w, mx, lv in events.group_by("w")
        .agg(pl.col("level").max().alias("mx"), pl.col("level").last().alias("lv"))
        .iter_rows()
        if w is not None
    }
    peak: list[int] = []
    at_end: list[int] = []
    level = 0
    for i in range(count):
        # A window without events keeps the level the previous one ended at.
        mx, level = per_window.get(i, (level, level))
        peak.append(max(mx, level))
        at_end.append(level)
    send_w = ((pl.col(s.SENT_NS) - t0) // w_ns).alias("_w")
    stats = (
        ok.group_by(send_w)
        .agg(
            *(
                pl.col(m).quantile(q, interpolation="linear").alias(f"{m}__{tag}")
                for m in CDF_METRICS
                for q, tag in ((0.5, "p50"), (0.99, "p99"))
            )
        )
        .filter(pl.col("_w").is_between(0, count - 1))
    )
    by_w = {int(r["_w"]): r for r in stats.iter_rows(named=True)}

    def col(name: str) -> tuple[float | None, ...]:
        out: list[float | None] = []
        for i in range(count):
            v = by_w.get(i, {}).get(name)
            out.append(float(v) if v is not None else None)
        return tuple(out)

    return Windows(
        window_s=window_s,
        start_s=tuple((t - t0) / 1e9 for t in starts),
        offered_per_s=tuple(n / window_s for n in offered),
        completed_per_s=tuple(n / window_s for n in done),
        in_flight_max=tuple(peak),
        in_flight_end=tuple(at_end),
        metrics=tuple(
            MetricWindows(metric=m, p50_ms=col(f"{m}__p50"), p99_ms=col(f"{m}__p99"))
            for m in CDF_METRICS
        ),
    )


def _stride(n: int, cap: int) -> int:
    return max(1, math.ceil(n / max(1, cap)))


def _samples(req: pl.DataFrame, t0: int, cap: int) -> Samples:
    rows = req.filter(pl.col(s.SENT_NS).is_not_null()).sort(s.SENT_NS)
    every = _stride(rows.height, cap)
    picked = rows.gather_every(every)

    def opt(name: str) -> tuple[float | None, ...]:
        return tuple(None if v is None else float(v) for v in picked.get_column(name).to_list())

    return Samples(
        total=rows.height,
        every=every,
        workload=tuple(str(w) for w in picked.get_column(e.CLASS).to_list()),
        send_s=tuple((int(t) - t0) / 1e9 for t in picked.get_column(s.SENT_NS).to_list()),
        ttft_ms=opt(e.TTFT_MS),
        tpot_ms=opt(e.TPOT_MS),
        e2e_ms=opt(e.E2E_MS),
    )


def _fidelity(req: pl.DataFrame, cap: int) -> FidelitySamples:
    rows = req.filter(
        pl.col(s.PROMPT_TOKENS).is_not_null() & pl.col(e.REQUESTED_PROMPT_TOKENS).is_not_null()
    ).sort(s.SENT_NS, nulls_last=True)
    picked = rows.gather_every(_stride(rows.height, cap))
    return FidelitySamples(
        total=rows.height,
        workload=tuple(str(w) for w in picked.get_column(e.CLASS).to_list()),
        requested=tuple(int(v) for v in picked.get_column(e.REQUESTED_PROMPT_TOKENS).to_list()),
        reported=tuple(int(v) for v in picked.get_column(s.PROMPT_TOKENS).to_list()),
    )


def _itl(counts: pl.LazyFrame, by_workload: bool, per_decade: int) -> tuple[Histogram, ...]:
    """The histograms from ``metrics.itl_counts_by_class``' distinct (class, gap, tokens)."""
    counted = counts.select(
        pl.col(e.CLASS) if by_workload else pl.lit(e.ALL).alias(e.CLASS),
        (pl.col(GAP_US).cast(pl.Float64) / 1e3 / pl.col(TOKENS_IN_CHUNK)).alias("_itl"),
        (pl.col(COUNT).cast(pl.Int64) * pl.col(TOKENS_IN_CHUNK).cast(pl.Int64)).alias("_w"),
    ).collect()
    positive = counted.filter(pl.col("_itl") > 0).get_column("_itl")
    if counted.height == 0 or positive.len() == 0:
        return ()
    lo_v, hi_v = positive.min(), positive.max()
    assert isinstance(lo_v, float)
    assert isinstance(hi_v, float)
    lo = math.floor(math.log10(lo_v) * per_decade)
    hi = max(lo + 1, math.floor(math.log10(hi_v) * per_decade) + 1)
    edges = tuple(10 ** (b / per_decade) for b in range(lo, hi + 1))
    binned = (
        counted.with_columns(
            pl.when(pl.col("_itl") > 0)
            .then((pl.col("_itl").log10() * per_decade).floor().cast(pl.Int64) - lo)
            .otherwise(0)
            .clip(0, hi - lo - 1)
            .alias("_b")
        )
        .group_by(e.CLASS, "_b")
        .agg(pl.col("_w").sum())
    )
    out: list[Histogram] = []
    classes = sorted(str(c) for c in binned.get_column(e.CLASS).unique().to_list())
    totals = binned.group_by("_b").agg(pl.col("_w").sum())
    groups = [(e.ALL, totals)] if by_workload else []
    groups += [(c, binned.filter(pl.col(e.CLASS) == c)) for c in classes]
    for name, frame in groups:
        weights = [0] * (hi - lo)
        for b, w in frame.select("_b", "_w").iter_rows():
            weights[int(b)] += int(w)
        out.append(Histogram(workload=name, edges_ms=edges, weights=tuple(weights)))
    return tuple(out)


def run_series(
    run: Path | str, options: SeriesOptions | None = None, *, reuse: RequestPass | None = None
) -> RunSeries:
    """The chart series of a run directory, Parquet file or glob of shards (see the module
    docstring). One collect of the request columns, one of the ITL histogram. ``reuse``:
    what ``metrics.analyze_pass`` read of the same run, selection and grouping (taken
    instead of reading the run again; ignored when any of them differs)."""
    options = options or SeriesOptions()
    bw = options.by_workload
    if (
        reuse is not None
        and reuse.run == str(run)
        and reuse.selection == options.selection
        and reuse.by_workload == bw
    ):
        counts, req = reuse.itl_counts, reuse.requests.collect()
    else:
        counts, req = _read(run, options)
    return _series(run, options, counts, req)


def _read(run: Path | str, options: SeriesOptions) -> tuple[pl.LazyFrame, pl.DataFrame]:
    lf = apply_selection(scan_run(run), options.selection)
    bw = options.by_workload
    classes_of_run = workloads(lf) if bw else None
    # One pass, a slice of requests at a time where the selection allows it (as analyze).
    sliced = summed_in_slices(
        run,
        options.selection,
        [
            (lambda part: itl_counts_by_class(part, bw, classes_of_run), itl_keys(bw)),
            (lambda part: request_frame(part, SLOTargets(), bw), None),
        ],
        columns=READ_COLUMNS,
    )
    if sliced is None:
        counts = itl_counts_by_class(lf, bw, classes_of_run)
        req = request_frame(lf, SLOTargets(), bw).collect()
    else:
        counts, req = sliced[0], sliced[1].collect()
    return counts, req


def _series(
    run: Path | str, options: SeriesOptions, counts: pl.LazyFrame, req: pl.DataFrame
) -> RunSeries:
    bw = options.by_workload
    due_min = req.get_column(s.DUE_NS).min()
    t0 = int(due_min) if isinstance(due_min, int) else 0
    end_max = req.get_column(s.END_NS).max()
    span_s = max(((int(end_max) if isinstance(end_max, int) else t0) - t0) / 1e9, 0.0)
    windows = min(options.windows, max(10, req.height // max(1, options.requests_per_window)))
    window_s = options.window_s or auto_window_s(span_s, windows=windows)
    classes = (
        tuple(sorted(str(c) for c in req.get_column(e.CLASS).unique().to_list()))
        if options.by_workload
        else ()
    )
    cdfs = [_cdf(e.ALL, m, req.get_column(m)) for m in CDF_METRICS]
    for c in classes:
        part = req.filter(pl.col(e.CLASS) == c)
        cdfs.extend(_cdf(c, m, part.get_column(m)) for m in CDF_METRICS)
    return RunSeries(
        run=str(run),
        classes=classes,
        cdfs=tuple(cdfs),
        windows=_windows(req, t0, window_s),
        samples=_samples(req, t0, options.max_points),
        itl=_itl(counts, bw, options.itl_bins_per_decade),
        fidelity=_fidelity(req, options.max_points),
    )
