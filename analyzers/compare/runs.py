"""Compare runs of the same trace on different deployments: differences with intervals.

``compare_runs([A, B, ...], options)`` compares every run after the first against the
first: per workload class, metric and percentile both values, the difference (absolute
and relative) with a seeded bootstrap interval (``analyzers.compare.bootstrap``); goodput when SLO
targets are given; per TTFT component (``decompose.request_terms``, where the server
reports its timings) the same; and plain verdict lines ("B lowers p99 TPOT by 38%
[31%, 44%]; raises p50 TTFT by 12 ms, of which transfer 9 ms").

No verdict line is a guess: when a run is invalid (any ``RunValidity`` flag but
``too_small``) every verdict is withheld in one line naming the run and the flag
(``Comparison.verdict``, an ``analyzers.compare.verdict.ComparisonVerdict``); a percentile
resting on fewer requests than ``validity.min_requests_for`` asks gets "no verdict ...:
too few samples" instead of its line; a difference whose interval includes 0 is "no
significant change".

Runs must have replayed the same trace (``analyzers.compare.identity``): different
fingerprints raise ``DifferentTracesError`` unless ``allow_different_traces``. The
per-request values compared come from ``analyzers.compare.samples``.

``time_scale`` (a simulator's ``--time-scale``, wall seconds per model second) puts every
client-measured latency on the server's clock. Must not import loadgen, httpx.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import polars as pl

from analyzers import exprs as e
from analyzers.analysis import METRICS, AnalysisOptions
from analyzers.compare.bootstrap import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    Difference,
    Sample,
    percentile_difference,
    proportion_difference,
)
from analyzers.compare.identity import TraceIdentity, check_same_trace
from analyzers.compare.samples import COMPARED_METRICS, RunSamples, component_frame, run_samples
from analyzers.compare.verdict import NO_VERDICT, ComparisonVerdict, Problem, withheld
from analyzers.decompose.columns import TERMS
from analyzers.errors import AnalyzerError
from analyzers.frames import RowSelection, scan_run, select_rows
from analyzers.goodput import SLOTargets
from analyzers.metrics import analyze, run_validity
from analyzers.validity import ValidityThresholds, min_requests_for

_NAMES: Final = {m.key: m.name for m in METRICS}


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
    requests: int = 0
    """The smaller of the two samples' sizes (0: not known)."""


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
    verdict: ComparisonVerdict | None = None
    """Set when the verdicts are withheld (an invalid run); ``verdicts`` is then its line."""


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


def _sorted_sample(frame: pl.DataFrame, term: str) -> Sample:
    return Sample.of(frame.get_column(f"{term}_ms").drop_nulls().sort().to_list())


def _component_deltas(
    base: pl.DataFrame,
    other: pl.DataFrame,
    options: CompareOptions,
    base_label: str,
    label: str,
    workloads: Sequence[str],
) -> list[ComponentDelta]:
    out: list[ComponentDelta] = []
    whole: list[ComponentDelta] = []
    for workload in workloads:
        a = base if workload == e.ALL else base.filter(pl.col(e.CLASS) == workload)
        b = other if workload == e.ALL else other.filter(pl.col(e.CLASS) == workload)
        if a.height == 0 or b.height == 0:
            continue
        if workload != e.ALL and (a.height, b.height) == (base.height, other.height) and whole:
            # The class holds every row of both runs: the whole run's deltas are its own.
            out.extend(dataclasses.replace(d, workload=workload) for d in whole)
            continue
        bands = [(_band(a, p), _band(b, p)) for p in options.percentiles]
        found: dict[tuple[int, int], ComponentDelta] = {}
        for i, term in enumerate(TERMS):
            col = f"{term}_ms"
            # One term's two samples at a time (sorted by Polars), for every percentile:
            # a million requests' terms held at once would take GiBs as Python floats.
            sa, sb = _sorted_sample(a, term), _sorted_sample(b, term)
            if not sa.size or not sb.size:
                continue
            for j, p in enumerate(options.percentiles):
                diff = percentile_difference(
                    sa,
                    sb,
                    p,
                    resamples=options.resamples,
                    confidence=options.confidence,
                    seed=options.seed + 7919 * i + int(p * 10),
                )
                band_a, band_b = bands[j]
                ma, mb = band_a.get_column(col).mean(), band_b.get_column(col).mean()
                attributed = (
                    float(mb) - float(ma)
                    if isinstance(ma, int | float) and isinstance(mb, int | float)
                    else None
                )
                found[(j, i)] = ComponentDelta(
                    workload=workload,
                    term=term,
                    percentile=p,
                    base_label=base_label,
                    label=label,
                    difference=diff,
                    attributed_ms=attributed,
                )
        mine = [found[key] for key in sorted(found)]  # percentile, then term: as before
        out.extend(mine)
        if workload == e.ALL:
            whole = mine
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
                        requests=min(sa.size, sb.size),
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
                    requests=min(a.goodput.requests, b.goodput.requests),
                )
            )
    return out


def run_problems(
    runs: Sequence[Path | str], labels: Sequence[str], selection: RowSelection
) -> list[Problem]:
    """The runs a comparison may not rest on: any validity flag but ``too_small`` (which
    each verdict line checks against its own percentile)."""
    out = []
    for run, label in zip(runs, labels, strict=True):
        # ``analyze``'s validity without its pass over the chunks: the class counts only
        # feed ``too_small``, which is left out here.
        v = run_validity(
            run,
            select_rows(scan_run(run), selection),
            class_counts=[],
            percentiles=(50.0,),
            thresholds=ValidityThresholds(),
        )
        flags = tuple(f for f in v.flags if f.kind != "too_small")
        if flags:
            out.append(Problem(side=label, step="", flags=flags))
    return out


def too_few(delta: MetricDelta) -> str | None:
    """Why ``delta``'s percentile rests on too few requests (None: enough)."""
    if delta.percentile is None or not delta.requests:
        return None
    need = min_requests_for(delta.percentile)
    if delta.requests >= need:
        return None
    where = f" ({delta.workload})" if delta.workload != e.ALL else ""
    return (
        f"{NO_VERDICT} on p{delta.percentile:g} {delta.name}{where}: too few samples "
        f"({delta.requests} requests; p{delta.percentile:g} needs >= {need})"
    )


# The verdict sentences' notation. Verdicts are part of the ``Comparison`` the analyzers
# return (and analyzers may not import reports), so these stay here, beside their one user.


def _pct(value: float) -> str:
    """A relative change in whole percent: ``0.123`` is ``12%``."""
    return f"{value * 100:.0f}%"


def _ms(value: float) -> str:
    """Milliseconds, three significant figures below 100 ms: ``12.3 ms``, ``1234 ms``."""
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
    problems = run_problems(runs, labels, options.selection)
    verdict = withheld(problems, "winner") if problems else None
    if verdict is not None:
        verdicts: tuple[str, ...] = (verdict.text,)
    else:
        verdicts = tuple(
            too_few(d) or verdict_line(d, components)
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
        verdict=verdict,
    )
