"""Run samples: the per-request values a comparison or a gate bootstraps, per class.

``run_samples`` gives each compared metric's values over a run's ok requests (ITL: per
token, weighted by the tokens a chunk carries), for the whole run and each workload class;
``component_frame`` gives the per-request TTFT terms where the server reported its own
timings. ``time_scale`` (a simulator's ``--time-scale``, wall seconds per model second)
puts client-measured latencies on the server's clock. Must not import loadgen or httpx.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import polars as pl

from analyzers import exprs as e
from analyzers.chunk_sums import itl_counts_by_class, itl_keys, itl_weights, workloads
from analyzers.compare.bootstrap import Sample
from analyzers.decompose.columns import TERMS
from analyzers.decompose.options import DecomposeOptions
from analyzers.decompose.terms import request_terms
from analyzers.errors import AnalyzerError
from analyzers.frames import RowSelection, scan_run, select_rows, summed_in_slices
from analyzers.goodput import SLOTargets
from analyzers.request_frame import READ_COLUMNS, request_frame

COMPARED_METRICS: Final = (e.TTFT_MS, e.TPOT_MS, e.ITL_MS, e.E2E_MS)
"""Metrics compared by default (per request; ITL per token)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricSamples:
    """One metric's values in one class of one run (a weighted sample for ITL)."""

    workload: str
    metric: str
    sample: Sample


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSamples:
    """Every compared metric's samples of one run, per class (``exprs.ALL``: all)."""

    run: str
    samples: tuple[MetricSamples, ...]

    def get(self, metric: str, workload: str = e.ALL) -> Sample | None:
        """The sample of ``metric`` in ``workload`` (None when absent or empty)."""
        for m in self.samples:
            if m.metric == metric and m.workload == workload:
                return m.sample if m.sample.size else None
        return None

    @property
    def workloads(self) -> tuple[str, ...]:
        """The classes present, ``ALL`` first."""
        names = {m.workload for m in self.samples} - {e.ALL}
        return (e.ALL, *sorted(names))


def run_samples(
    run: Path | str,
    *,
    metrics: Sequence[str] = COMPARED_METRICS,
    selection: RowSelection | None = None,
    by_workload: bool = True,
    time_scale: float = 1.0,
) -> RunSamples:
    """The per-request values (ITL: per-token, weighted) of ``metrics`` over ok requests,
    for the whole run and, with ``by_workload``, each class; divided by ``time_scale``.

    Read as ``analyze`` reads: a slice of requests at a time where the selection allows
    it, the ITL as counts of equal (gap, tokens) pairs (``chunk_sums.itl_counts_by_class``)
    rather than one row per chunk, so a run of a million requests never holds more than a
    slice's chunks; the per-request values are sorted by Polars (the samples' own sort then
    only checks the order)."""
    selection = selection or RowSelection()
    lf = select_rows(scan_run(run), selection)
    request_metrics = [m for m in metrics if m != e.ITL_MS]
    classes_of_run = workloads(lf) if by_workload else None

    def per_request(part: pl.LazyFrame) -> pl.LazyFrame:
        return request_frame(part, SLOTargets(), by_workload).select(e.CLASS, *request_metrics)

    def itl_counted(part: pl.LazyFrame) -> pl.LazyFrame:
        return itl_counts_by_class(part, by_workload, classes_of_run)

    queries: list[tuple[Callable[[pl.LazyFrame], pl.LazyFrame], Sequence[str] | None]] = [
        (per_request, None)
    ]
    if e.ITL_MS in metrics:
        queries.append((itl_counted, itl_keys(by_workload)))
    sliced = summed_in_slices(run, selection, queries, columns=READ_COLUMNS)
    frames = sliced if sliced is not None else [query(lf) for query, _ in queries]
    plans = [frames[0]]
    if e.ITL_MS in metrics:
        plans.append(
            itl_weights(frames[1], by_workload)
            .group_by(e.CLASS, e.ITL_MS)
            .agg(pl.col("_w").sum())
            .filter(pl.col(e.ITL_MS).is_not_null() & (pl.col("_w") > 0))
            .sort(e.CLASS, e.ITL_MS)
        )
    collected = pl.collect_all(plans)
    per_request_rows = collected[0]
    out: list[MetricSamples] = []
    classes = sorted({str(c) for c in per_request_rows.get_column(e.CLASS).to_list()})
    # One class holding every row: its samples are the run's, the same objects.
    only = (
        by_workload and len(classes) == 1 and per_request_rows.get_column(e.CLASS).null_count() == 0
    )
    groups = [(e.ALL, per_request_rows)]
    if by_workload and not only:
        groups += [(c, per_request_rows.filter(pl.col(e.CLASS) == c)) for c in classes]
    for name, part in groups:
        for metric in request_metrics:
            values = (part.get_column(metric).drop_nulls().sort() / time_scale).to_list()
            out.append(MetricSamples(workload=name, metric=metric, sample=Sample.of(values)))
    if e.ITL_MS in metrics:
        itl = collected[1]
        itl_groups = [(e.ALL, itl.group_by(e.ITL_MS).agg(pl.col("_w").sum()).sort(e.ITL_MS))]
        if by_workload and not only:
            itl_groups += [(c, itl.filter(pl.col(e.CLASS) == c)) for c in classes]
        for name, part in itl_groups:
            values = (part.get_column(e.ITL_MS) / time_scale).to_list()
            weights = [int(w) for w in part.get_column("_w").to_list()]
            out.append(
                MetricSamples(workload=name, metric=e.ITL_MS, sample=Sample.of(values, weights))
            )
    if only:
        out += [MetricSamples(workload=classes[0], metric=m.metric, sample=m.sample) for m in out]
    return RunSamples(run=str(run), samples=tuple(out))


def component_frame(
    run: Path | str, selection: RowSelection, by_workload: bool, time_scale: float = 1.0
) -> pl.DataFrame | None:
    """Per-request TTFT terms (``{term}_ms``, ``TTFT_FROM_DUE_MS``, ``CLASS``: only those)
    from the server's own timings, or None when the server reported none. With
    ``time_scale`` the client-measured terms are put on the server's clock (and the network
    recomputed)."""
    try:
        terms = request_terms(
            run,
            None,
            DecomposeOptions(selection=selection, by_workload=by_workload, time_scale=time_scale),
        )
    except AnalyzerError:
        return None
    # Only what a comparison reads: a million requests' every decomposition column, held
    # for each run compared, would be most of its memory.
    return terms.frame.select(e.CLASS, e.TTFT_FROM_DUE_MS, *(f"{term}_ms" for term in TERMS))
