"""Run samples: the per-request values a comparison or a gate bootstraps, per class.

``run_samples`` gives each compared metric's values over a run's ok requests (ITL: per
token, weighted by the tokens a chunk carries), for the whole run and each workload class;
``component_frame`` gives the per-request TTFT terms where the server reported its own
timings. ``time_scale`` (a simulator's ``--time-scale``, wall seconds per model second)
puts client-measured latencies on the server's clock. Must not import loadgen or httpx.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import polars as pl

from analyzers import exprs as e
from analyzers.compare.bootstrap import Sample
from analyzers.decompose.options import DecomposeOptions
from analyzers.decompose.terms import request_terms
from analyzers.errors import AnalyzerError
from analyzers.frames import TOKENS_IN_CHUNK, RowSelection, chunk_frame, scan_run, select_rows
from analyzers.goodput import SLOTargets
from analyzers.metrics import request_frame
from traces import schema as s

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
    for the whole run and, with ``by_workload``, each class; divided by ``time_scale``."""
    lf = select_rows(scan_run(run), selection or RowSelection())
    request_metrics = [m for m in metrics if m != e.ITL_MS]
    frame = request_frame(lf, SLOTargets(), by_workload).select(e.CLASS, *request_metrics)
    queries = [frame]
    if e.ITL_MS in metrics:
        rows = lf.filter(e.is_ok()).with_columns(
            (pl.col(s.WORKLOAD) if by_workload else pl.lit(e.ALL)).cast(pl.String).alias(e.CLASS)
        )
        chunks = chunk_frame(rows, keep=[e.CLASS]).filter(pl.col("gap_us").is_not_null())
        queries.append(
            chunks.select(e.CLASS, e.itl_ms(), pl.col(TOKENS_IN_CHUNK).cast(pl.Int64).alias("_w"))
            .group_by(e.CLASS, e.ITL_MS)
            .agg(pl.col("_w").sum())
        )
    collected = pl.collect_all(queries)
    per_request = collected[0]
    out: list[MetricSamples] = []
    classes = sorted({str(c) for c in per_request.get_column(e.CLASS).to_list()})
    groups = [(e.ALL, per_request)]
    if by_workload:
        groups += [(c, per_request.filter(pl.col(e.CLASS) == c)) for c in classes]
    for name, part in groups:
        for metric in request_metrics:
            values = [v / time_scale for v in part.get_column(metric).drop_nulls().to_list()]
            out.append(MetricSamples(workload=name, metric=metric, sample=Sample.of(values)))
    if e.ITL_MS in metrics:
        itl = collected[1].drop_nulls(e.ITL_MS)
        itl_groups = [(e.ALL, itl)]
        if by_workload:
            itl_groups += [(c, itl.filter(pl.col(e.CLASS) == c)) for c in classes]
        for name, part in itl_groups:
            values = [v / time_scale for v in part.get_column(e.ITL_MS).to_list()]
            weights = [int(w) for w in part.get_column("_w").to_list()]
            out.append(
                MetricSamples(workload=name, metric=e.ITL_MS, sample=Sample.of(values, weights))
            )
    return RunSamples(run=str(run), samples=tuple(out))


def component_frame(
    run: Path | str, selection: RowSelection, by_workload: bool, time_scale: float = 1.0
) -> pl.DataFrame | None:
    """Per-request TTFT terms (``{term}_ms``, ``TTFT_FROM_DUE_MS``, ``CLASS``) from the
    server's own timings, or None when the server reported none. With ``time_scale`` the
    client-measured terms are put on the server's clock (and the network recomputed)."""
    try:
        terms = request_terms(
            run,
            None,
            DecomposeOptions(selection=selection, by_workload=by_workload, time_scale=time_scale),
        )
    except AnalyzerError:
        return None
    return terms.frame
