"""Compare runs of the same trace on different deployments: differences with intervals.

``compare_runs([A, B, ...], options)`` compares every run after the first against the
first: per workload class, metric and percentile both values, the difference (absolute
and relative) with a seeded bootstrap interval (``analyzers.bootstrap``); goodput when SLO
targets are given; per TTFT component (``decompose.request_terms``, where the server
reports its timings) the same; and plain verdict lines ("B lowers p99 TPOT by 38%
[31%, 44%]; raises p50 TTFT by 12 ms, of which transfer 9 ms").

Runs must have replayed the same trace: ``trace_identity`` fingerprints a run by the
content hash its ``run.json`` records (``trace.sha256``) when both have one, else by the
request ids and token counts of its rows; different fingerprints raise
``DifferentTracesError`` unless ``allow_different_traces``.

``time_scale`` (a simulator's ``--time-scale``, wall seconds per model second) puts every
client-measured latency on the server's clock. Must not import loadgen, httpx.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import polars as pl

from analyzers import exprs as e
from analyzers.bootstrap import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    Difference,
    Sample,
    percentile_difference,
    proportion_difference,
)
from analyzers.decompose_terms import SERVER_SIDE_MS, TERMS, DecomposeOptions, request_terms
from analyzers.errors import AnalyzerError, DifferentTracesError
from analyzers.frames import TOKENS_IN_CHUNK, RowSelection, chunk_frame, scan_run, select_rows
from analyzers.goodput import SLOTargets
from analyzers.metrics import METRICS, AnalysisOptions, analyze, request_frame
from traces import schema as s
from traces.errors import TraceError
from traces.io import read_run_json

COMPARED_METRICS: Final = (e.TTFT_MS, e.TPOT_MS, e.ITL_MS, e.E2E_MS)
"""Metrics compared by default (per request; ITL per token)."""
_NAMES: Final = {m.key: m.name for m in METRICS}
_SERVER_TERMS: Final = ("queue", "prefill", "transfer", "first_token")


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceIdentity:
    """What a run replayed: a fingerprint, how it was made, and the trace path."""

    fingerprint: str
    basis: str
    """``sha256`` (the trace file's content hash in run.json) or ``rows`` (request ids)."""
    path: str | None
    requests: int


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


@dataclass(frozen=True, slots=True, kw_only=True)
class CompareOptions:
    """What ``compare_runs`` compares and how sure it must be."""

    metrics: tuple[str, ...] = COMPARED_METRICS
    percentiles: tuple[float, ...] = (50.0, 90.0, 99.0)
    by_workload: bool = True
    selection: RowSelection = field(default_factory=RowSelection)
    goodput: SLOTargets | None = None
    components: bool = True
    resamples: int = DEFAULT_RESAMPLES
    confidence: float = DEFAULT_CONFIDENCE
    seed: int = 0
    allow_different_traces: bool = False
    time_scale: float = 1.0
    labels: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricDelta:
    """One (class, metric, percentile) of run ``label`` against the base run."""

    workload: str
    metric: str
    name: str
    unit: str
    percentile: float | None
    base_label: str
    label: str
    difference: Difference


@dataclass(frozen=True, slots=True, kw_only=True)
class ComponentDelta:
    """One TTFT component's percentile against the base run, plus its share of the TTFT
    difference near that percentile (``attributed_ms``: the difference of the term's mean
    over requests ranked within a few percentile points of it; these add up)."""

    workload: str
    term: str
    percentile: float
    base_label: str
    label: str
    difference: Difference
    attributed_ms: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """Every run against the first: deltas, components, verdicts and notes."""

    runs: tuple[str, ...]
    labels: tuple[str, ...]
    traces: tuple[TraceIdentity, ...]
    same_trace: bool
    metrics: tuple[MetricDelta, ...]
    components: tuple[ComponentDelta, ...]
    verdicts: tuple[str, ...]
    notes: tuple[str, ...]
    options: CompareOptions


# ----------------------------------------------------------------- identity


def trace_identity(run: Path | str) -> TraceIdentity:
    """Fingerprint what a run replayed (see the module docstring)."""
    path: str | None = None
    sha: str | None = None
    run_path = Path(str(run))
    if run_path.is_dir():
        try:
            info = read_run_json(run_path)
        except TraceError:
            info = {}
        trace = info.get("trace")
        if isinstance(trace, dict):
            path = str(trace["path"]) if trace.get("path") is not None else None
            sha = trace.get("sha256") if isinstance(trace.get("sha256"), str) else None
    rows = (
        scan_run(run)
        .select(
            pl.col(s.REQUEST_ID).cast(pl.String),
            pl.col(s.INPUT_TOKENS).cast(pl.Int64),
            pl.col(s.OUTPUT_TOKENS).cast(pl.Int64),
        )
        .unique()
        .sort(s.REQUEST_ID)
        .collect()
    )
    if sha is not None:
        return TraceIdentity(fingerprint=sha, basis="sha256", path=path, requests=rows.height)
    digest = hashlib.sha256()
    for rid, n_in, n_out in rows.iter_rows():
        digest.update(f"{rid}\t{n_in}\t{n_out}\n".encode())
    return TraceIdentity(
        fingerprint=digest.hexdigest(), basis="rows", path=path, requests=rows.height
    )


def check_same_trace(
    runs: Sequence[Path | str], allow_different: bool
) -> tuple[tuple[TraceIdentity, ...], bool]:
    """The runs' identities and whether they agree; raises ``DifferentTracesError`` when
    they do not and ``allow_different`` is false."""
    ids = tuple(trace_identity(r) for r in runs)
    basis = {i.basis for i in ids}
    if len(basis) > 1:
        # One run recorded a content hash, another did not: compare by rows instead.
        ids = tuple(
            i if i.basis == "rows" else _rows_identity(r, i) for r, i in zip(runs, ids, strict=True)
        )
    same = len({i.fingerprint for i in ids}) == 1
    if not same and not allow_different:
        detail = "; ".join(
            f"{r}: {i.requests} requests, {i.basis} {i.fingerprint[:12]}"
            + (f" ({i.path})" if i.path else "")
            for r, i in zip(runs, ids, strict=True)
        )
        raise DifferentTracesError(
            f"the runs replayed different traces ({detail}); pass --allow-different-traces "
            "to compare them anyway"
        )
    return ids, same


def _rows_identity(run: Path | str, known: TraceIdentity) -> TraceIdentity:
    digest = hashlib.sha256()
    rows = (
        scan_run(run)
        .select(pl.col(s.REQUEST_ID).cast(pl.String), s.INPUT_TOKENS, s.OUTPUT_TOKENS)
        .unique()
        .sort(s.REQUEST_ID)
        .collect()
    )
    for rid, n_in, n_out in rows.iter_rows():
        digest.update(f"{rid}\t{n_in}\t{n_out}\n".encode())
    return TraceIdentity(
        fingerprint=digest.hexdigest(), basis="rows", path=known.path, requests=rows.height
    )


# ----------------------------------------------------------------- samples


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
            run, None, DecomposeOptions(selection=selection, by_workload=by_workload)
        )
    except AnalyzerError:
        return None
    frame = terms.frame
    if time_scale != 1:
        client = [
            *(f"{t}_ms" for t in ("client_delay", "connect", "write")),
        ]
        server_sum = pl.sum_horizontal([pl.col(f"{t}_ms") for t in _SERVER_TERMS])
        frame = frame.with_columns(
            *(pl.col(c) / time_scale for c in client),
            (pl.col(SERVER_SIDE_MS) / time_scale - server_sum).alias("network_ms"),
        ).with_columns(
            pl.sum_horizontal([pl.col(f"{t}_ms") for t in TERMS]).alias(e.TTFT_FROM_DUE_MS)
        )
    return frame


# ----------------------------------------------------------------- comparison


def _label(run: Path | str, index: int, labels: tuple[str, ...] | None) -> str:
    if labels is not None and index < len(labels):
        return labels[index]
    name = Path(str(run)).name or str(run)
    return name


def _band(frame: pl.DataFrame, percentile: float) -> pl.DataFrame:
    """Requests whose TTFT ranks within a few percentile points of ``percentile``."""
    width = max(1.0, min(5.0, 100 - percentile))
    total = pl.col(e.TTFT_FROM_DUE_MS)
    lo = frame.select(total.quantile(max(0.0, percentile - width) / 100, "linear")).item()
    hi = frame.select(total.quantile(min(100.0, percentile + width) / 100, "linear")).item()
    return frame.filter((total >= lo) & (total <= hi))


def _component_deltas(
    base: pl.DataFrame,
    other: pl.DataFrame,
    options: CompareOptions,
    base_label: str,
    label: str,
    workloads: Sequence[str],
) -> list[ComponentDelta]:
    out: list[ComponentDelta] = []
    for workload in workloads:
        a = base if workload == e.ALL else base.filter(pl.col(e.CLASS) == workload)
        b = other if workload == e.ALL else other.filter(pl.col(e.CLASS) == workload)
        if a.height == 0 or b.height == 0:
            continue
        for p in options.percentiles:
            band_a, band_b = _band(a, p), _band(b, p)
            for i, term in enumerate(TERMS):
                col = f"{term}_ms"
                sa = Sample.of(a.get_column(col).drop_nulls().to_list())
                sb = Sample.of(b.get_column(col).drop_nulls().to_list())
                if not sa.size or not sb.size:
                    continue
                diff = percentile_difference(
                    sa,
                    sb,
                    p,
                    resamples=options.resamples,
                    confidence=options.confidence,
                    seed=options.seed + 7919 * i + int(p * 10),
                )
                ma, mb = band_a.get_column(col).mean(), band_b.get_column(col).mean()
                attributed = (
                    float(mb) - float(ma)
                    if isinstance(ma, int | float) and isinstance(mb, int | float)
                    else None
                )
                out.append(
                    ComponentDelta(
                        workload=workload,
                        term=term,
                        percentile=p,
                        base_label=base_label,
                        label=label,
                        difference=diff,
                        attributed_ms=attributed,
                    )
                )
    return out


def _metric_deltas(
    base: RunSamples,
    other: RunSamples,
    options: CompareOptions,
    base_label: str,
    label: str,
) -> list[MetricDelta]:
    out: list[MetricDelta] = []
    workloads = [w for w in base.workloads if w in other.workloads]
    for workload in workloads:
        for mi, metric in enumerate(options.metrics):
            sa, sb = base.get(metric, workload), other.get(metric, workload)
            if sa is None or sb is None:
                continue
            for p in options.percentiles:
                diff = percentile_difference(
                    sa,
                    sb,
                    p,
                    resamples=options.resamples,
                    confidence=options.confidence,
                    seed=options.seed + 104729 * mi + int(p * 10),
                )
                out.append(
                    MetricDelta(
                        workload=workload,
                        metric=metric,
                        name=_NAMES.get(metric, metric),
                        unit="ms",
                        percentile=p,
                        base_label=base_label,
                        label=label,
                        difference=diff,
                    )
                )
    return out


def _goodput_deltas(
    runs: Sequence[Path | str], options: CompareOptions, labels: Sequence[str]
) -> list[MetricDelta]:
    assert options.goodput is not None
    g = options.goodput
    scale = options.time_scale
    targets = SLOTargets(
        ttft_ms=g.ttft_ms * scale if g.ttft_ms is not None else None,
        tpot_ms=g.tpot_ms * scale if g.tpot_ms is not None else None,
        ttft_basis=g.ttft_basis,
    )
    analyses = [
        analyze(
            r,
            AnalysisOptions(
                percentiles=(50.0,),
                by_workload=options.by_workload,
                selection=options.selection,
                slo=targets,
            ),
        )
        for r in runs
    ]
    out: list[MetricDelta] = []
    base = analyses[0]
    for label, other in zip(labels[1:], analyses[1:], strict=True):
        pairs = [(base.overall, other.overall)]
        by_name = {c.workload: c for c in other.classes}
        pairs += [(c, by_name[c.workload]) for c in base.classes if c.workload in by_name]
        for a, b in pairs:
            if a.goodput is None or b.goodput is None or not a.requests or not b.requests:
                continue
            diff = proportion_difference(
                a.goodput.good,
                a.goodput.requests,
                b.goodput.good,
                b.goodput.requests,
                resamples=options.resamples,
                confidence=options.confidence,
                seed=options.seed,
            )
            out.append(
                MetricDelta(
                    workload=a.workload,
                    metric="goodput",
                    name="Goodput",
                    unit="fraction",
                    percentile=None,
                    base_label=labels[0],
                    label=label,
                    difference=diff,
                )
            )
    return out


def _pct(value: float) -> str:
    return f"{value * 100:.0f}%"


def _ms(value: float) -> str:
    return f"{value:.3g} ms" if abs(value) < 100 else f"{value:.0f} ms"


def verdict_line(delta: MetricDelta, components: Sequence[ComponentDelta] = ()) -> str:
    """One plain sentence for a delta: what changed, by how much, how sure, and (for TTFT)
    which component carried most of the change."""
    d = delta.difference
    stat = f"p{delta.percentile:g} {delta.name}" if delta.percentile is not None else delta.name
    where = f" ({delta.workload})" if delta.workload != e.ALL else ""
    if delta.unit == "fraction":
        diff = d.absolute
        if not d.significant:
            return (
                f"{delta.label} vs {delta.base_label}: no significant change in {stat}{where} "
                f"({diff.estimate * 100:+.1f} points [{diff.low * 100:+.1f}, "
                f"{diff.high * 100:+.1f}])"
            )
        verb = "raises" if diff.estimate > 0 else "lowers"
        return (
            f"{delta.label} {verb} {stat}{where} by {abs(diff.estimate) * 100:.1f} points "
            f"[{diff.low * 100:+.1f}, {diff.high * 100:+.1f}] ({d.a:.1%} -> {d.b:.1%})"
        )
    if not d.significant:
        rel = d.relative
        extra = f" ({rel.estimate:+.0%} [{rel.low:+.0%}, {rel.high:+.0%}])" if rel else ""
        return f"{delta.label} vs {delta.base_label}: no significant change in {stat}{where}{extra}"
    verb = "raises" if d.absolute.estimate > 0 else "lowers"
    sign = 1 if d.absolute.estimate > 0 else -1
    if delta.metric in (e.TTFT_MS, e.TTFT_FROM_DUE_MS):
        a = d.absolute
        lo, hi = sorted((sign * a.low, sign * a.high))
        text = (
            f"{delta.label} {verb} {stat}{where} by {_ms(abs(a.estimate))} "
            f"[{_ms(lo)}, {_ms(hi)}] ({_ms(d.a)} -> {_ms(d.b)})"
        )
        mine = [
            c
            for c in components
            if c.workload == delta.workload
            and c.percentile == delta.percentile
            and c.label == delta.label
            and c.attributed_ms is not None
        ]
        same_way = [c for c in mine if (c.attributed_ms or 0) * sign > 0]
        if same_way:
            top = max(same_way, key=lambda c: abs(c.attributed_ms or 0))
            text += f", of which {top.term.replace('_', ' ')} {_ms(abs(top.attributed_ms or 0))}"
        return text
    rel = d.relative
    if rel is None:
        return f"{delta.label} {verb} {stat}{where} by {_ms(abs(d.absolute.estimate))}"
    lo, hi = sorted((sign * rel.low, sign * rel.high))
    return (
        f"{delta.label} {verb} {stat}{where} by {_pct(abs(rel.estimate))} "
        f"[{_pct(lo)}, {_pct(hi)}] ({_ms(d.a)} -> {_ms(d.b)})"
    )


def compare_runs(runs: Sequence[Path | str], options: CompareOptions | None = None) -> Comparison:
    """Compare every run after the first against the first (see the module docstring)."""
    options = options or CompareOptions()
    if len(runs) < 2:
        raise AnalyzerError("compare needs at least two runs")
    unknown = [m for m in options.metrics if m not in _NAMES]
    if unknown:
        raise AnalyzerError(f"unknown metric(s) {', '.join(unknown)} (known: {', '.join(_NAMES)})")
    ids, same = check_same_trace(runs, options.allow_different_traces)
    labels = tuple(_label(r, i, options.labels) for i, r in enumerate(runs))
    if len(set(labels)) < len(labels):
        labels = tuple(f"{label}#{i + 1}" for i, label in enumerate(labels))
    notes: list[str] = []
    if not same:
        notes.append("the runs replayed different traces: differences mix load and deployment")
    samples = [
        run_samples(
            r,
            metrics=options.metrics,
            selection=options.selection,
            by_workload=options.by_workload,
            time_scale=options.time_scale,
        )
        for r in runs
    ]
    metrics: list[MetricDelta] = []
    for label, other in zip(labels[1:], samples[1:], strict=True):
        metrics.extend(_metric_deltas(samples[0], other, options, labels[0], label))
    if options.goodput is not None:
        metrics.extend(_goodput_deltas(runs, options, labels))
    components: list[ComponentDelta] = []
    if options.components:
        frames = [
            component_frame(r, options.selection, options.by_workload, options.time_scale)
            for r in runs
        ]
        if frames[0] is None or any(f is None for f in frames[1:]):
            notes.append(
                "no TTFT components: the server did not report its timings "
                "(use `loadgen decompose` with a budget for predicted ones)"
            )
        else:
            base_frame = frames[0]
            workloads = samples[0].workloads
            for label, frame in zip(labels[1:], frames[1:], strict=True):
                assert base_frame is not None
                assert frame is not None
                components.extend(
                    _component_deltas(base_frame, frame, options, labels[0], label, workloads)
                )
    verdicts = tuple(
        verdict_line(d, components)
        for d in metrics
        if d.workload == e.ALL and (d.percentile in (50.0, 99.0) or d.percentile is None)
    )
    if options.time_scale != 1:
        notes.append(f"latencies divided by the time scale {options.time_scale:g} (server's clock)")
    return Comparison(
        runs=tuple(str(r) for r in runs),
        labels=labels,
        traces=ids,
        same_trace=same,
        metrics=tuple(metrics),
        components=tuple(components),
        verdicts=verdicts,
        notes=tuple(notes),
        options=options,
    )
