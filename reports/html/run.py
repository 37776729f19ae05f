"""One run in the report: the facts of ``run.json``, the analyzers' results, the verdicts,
and the run's HTML tables.

``load_run_report`` asks the analyzers for every number (``metrics.analyze``,
``decompose.decompose``, ``timeseries.run_series``, ``slo_eval.evaluate``); the rest only formats
them. The facts are ``run.json``'s ``RunInfo`` as recorded: the endpoint is shown without
user info, query or fragment, so no credential reaches the page. Must not import loadgen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Final, Literal
from urllib.parse import urlsplit, urlunsplit

from analyzers.analysis import Analysis, ClassSummary
from analyzers.cache import CacheOptions
from analyzers.decompose import TERMS, BudgetModel, ClassDecomposition, Decomposition
from analyzers.frames import RowSelection
from analyzers.slo.evaluate import ObjectiveResult
from analyzers.slo.parse import SLOSet
from analyzers.timeseries import RunSeries
from reports import fmt
from reports.cache import cache_lines
from traces import schema as s
from traces.runinfo import RunInfo

DEFAULT_PERCENTILES: Final = (50.0, 90.0, 95.0, 99.0, 99.9)
DECOMPOSE_PERCENTILES: Final = (50.0, 90.0, 99.0, 99.9)

Tone = Literal["ok", "warn", "bad", "info"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFacts:
    """What was run, as ``run.json`` recorded it (None: not recorded)."""

    path: str
    run_id: str | None
    trace: str | None
    endpoint: str | None
    model: str | None
    load: str | None
    started: str | None
    duration_s: float | None
    status: str | None
    versions: str | None


def safe_url(url: str) -> str:
    """``url`` without user info, query or fragment (where credentials hide)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _load_text(info: RunInfo) -> str:
    load, config = info.load, info.config
    parts = [f"{load.mode} loop"]
    if config.concurrency:
        parts.append(f"concurrency {config.concurrency}")
    if config.rate:
        parts.append(f"rate {config.rate:g} req/s")
    if load.time_factor != 1:
        parts.append(f"time x{load.time_factor:g}")
    if config.max_inflight:
        parts.append(f"at most {config.max_inflight} in flight")
    parts.append(f"{load.requests:,} requests")
    if load.workers > 1:
        parts.append(f"{load.workers} workers")
    return ", ".join(parts)


def _started(wall_ns: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(wall_ns / 1e9, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def run_facts(run: Path | str) -> RunFacts:
    """The facts of a run directory (or the directory holding a run file); all None when
    it has no ``run.json``. A ``run.json`` that cannot be read raises, as for the analysis
    (``analyzers.frames.run_info``)."""
    from analyzers.frames import run_info

    path = Path(str(run))
    directory = path if path.is_dir() else path.parent
    if directory.name == s.PARTS_DIR:
        directory = directory.parent
    info = run_info(directory)
    if info is None:
        return RunFacts(
            path=str(run), run_id=None, trace=None, endpoint=None, model=None, load=None,
            started=None, duration_s=None, status=None, versions=None,
        )  # fmt: skip
    source = info.trace.metadata.get("source")
    trace_text = f"{info.trace.path} ({source})" if source else info.trace.path
    shown = [
        f"{k} {info.versions[k]}"
        for k in ("llm-loadgen", "python", "httpx", "pyarrow", "uvloop", "platform")
        if info.versions.get(k)
    ]
    return RunFacts(
        path=str(run),
        run_id=info.run_id,
        trace=trace_text,
        endpoint=safe_url(info.endpoint.base_url),
        model=info.endpoint.model,
        load=_load_text(info),
        started=_started(info.clock.anchor_wall_ns),
        duration_s=info.result.duration_s if info.result is not None else None,
        status=info.status,
        versions=", ".join(shown) or None,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportOptions:
    """What a report covers. ``slo_ttft_ms`` draws the SLO lines, sets the goodput TTFT
    target and the decomposition's SLO, and, when ``slos`` has no objectives, is gated as
    ``ttft_from_due_ms.p99 <= slo``. ``budget``: the decomposition's budget (without it the
    decomposition needs the server's own timings)."""

    slo_ttft_ms: float | None = None
    slos: SLOSet | None = None
    budget: BudgetModel | None = None
    selection: RowSelection = field(default_factory=RowSelection)
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    time_scale: float = 1.0
    """A simulator's ``--time-scale``: comparisons and the decomposition put client
    latencies on its clock (the server's timings already are)."""
    cache: CacheOptions | None = field(default_factory=CacheOptions)
    """Where each run's trace is for the expected cached tokens (default: run.json's)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """One line of the verdict list: its tone, a short label and the text."""

    tone: Tone
    label: str
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RunReport:
    """Everything the report shows about one run (numbers from the analyzers)."""

    label: str
    facts: RunFacts
    analysis: Analysis
    series: RunSeries
    decomposition: Decomposition | None
    decomposition_note: str | None
    gate: tuple[ObjectiveResult, ...]
    options: ReportOptions

    def verdicts(self) -> tuple[Verdict, ...]:
        """The SLO gate, the goodput, the validity flags and the decomposition's verdicts."""
        return run_verdicts(self)


def gate_slos(options: ReportOptions) -> SLOSet:
    """The objectives the report gates on (see ``ReportOptions``)."""
    from analyzers.slo.parse import parse_rules

    slos = options.slos or SLOSet()
    if not slos.objectives and options.slo_ttft_ms is not None:
        slos = slos.merged(parse_rules([f"ttft_from_due_ms.p99<={options.slo_ttft_ms:g}"]))
    return slos


def load_run_report(
    run: Path | str, options: ReportOptions, *, label: str | None = None
) -> RunReport:
    """Analyze ``run`` for the report: metrics, chart series, decomposition, SLO gate."""
    from analyzers.analysis import AnalysisOptions
    from analyzers.decompose import DecomposeOptions, decompose
    from analyzers.errors import AnalyzerError
    from analyzers.goodput import SLOTargets
    from analyzers.metrics import analyze_pass
    from analyzers.slo.evaluate import evaluate
    from analyzers.timeseries import SeriesOptions, run_series

    slos = gate_slos(options)
    goodput = slos.goodput
    if goodput == SLOTargets() and options.slo_ttft_ms is not None:
        goodput = SLOTargets(ttft_ms=options.slo_ttft_ms)
    percentiles = tuple(sorted({*options.percentiles, *slos.percentiles}))
    analysis, read = analyze_pass(
        run,
        AnalysisOptions(
            percentiles=percentiles, selection=options.selection, slo=goodput, cache=options.cache
        ),
    )
    # The series take the rows analyze read (one pass over the run for both).
    series = run_series(run, SeriesOptions(selection=options.selection), reuse=read)
    decomposition: Decomposition | None = None
    note: str | None = None
    try:
        decomposition = decompose(
            run,
            options.budget,
            DecomposeOptions(
                percentiles=DECOMPOSE_PERCENTILES,
                selection=options.selection,
                slo_ttft_ms=options.slo_ttft_ms,
                time_scale=options.time_scale,
            ),
        )
    except AnalyzerError as exc:
        note = f"no TTFT decomposition: {exc}"
    path = Path(str(run))
    return RunReport(
        label=label or (path.parent.name if path.name == "run" else path.name) or str(run),
        facts=run_facts(run),
        analysis=analysis,
        series=series,
        decomposition=decomposition,
        decomposition_note=note,
        gate=evaluate(analysis, slos) if slos.objectives else (),
        options=options,
    )


_GATE_TONE: Final[dict[str, Tone]] = {"fail": "bad", "no_data": "warn", "pass": "ok"}


def gate_verdicts(gate: Sequence[ObjectiveResult]) -> list[Verdict]:
    """The gate's overall verdict, then one line per objective (broken first)."""
    if not gate:
        return [Verdict(tone="info", label="SLO gate", text="no SLO given (--slo-ttft-ms)")]
    failed = sum(g.status == "fail" for g in gate)
    missing = sum(g.status == "no_data" for g in gate)
    if failed:
        head = Verdict(tone="bad", label="SLO gate: FAIL", text=f"{failed} of {len(gate)} broken")
    elif missing:
        head = Verdict(
            tone="warn", label="SLO gate: NO DATA", text=f"{missing} of {len(gate)} unchecked"
        )
    else:
        head = Verdict(tone="ok", label="SLO gate: PASS", text=f"all {len(gate)} objectives met")
    order = {"fail": 0, "no_data": 1, "pass": 2}
    lines = [
        Verdict(tone=_GATE_TONE[g.status], label=g.objective.label, text=g.message)
        for g in sorted(gate, key=lambda g: order[g.status])
    ]
    return [head, *lines]


def run_verdicts(r: RunReport) -> tuple[Verdict, ...]:
    """The verdict lines of one run: gate, goodput, validity, decomposition."""
    out = gate_verdicts(r.gate)
    gp = r.analysis.overall.goodput
    if gp is not None:
        out.append(
            Verdict(
                tone="info",
                label="goodput",
                text=f"{gp.fraction:.1%} of requests ({gp.good:,}/{gp.requests:,}) were ok and "
                f"met their SLOs, {gp.rate_per_s:.2f} req/s",
            )
        )
    v = r.analysis.validity
    if v.valid:
        out.append(
            Verdict(
                tone="ok",
                label="valid run",
                text="not client-bound, prompts faithful, enough requests for every percentile",
            )
        )
    out.extend(Verdict(tone="warn", label=f.kind.replace("_", "-"), text=f.reason) for f in v.flags)
    if r.decomposition is not None:
        out.extend(
            Verdict(tone="info", label="TTFT", text=t)
            for t in decomposition_verdicts(r.decomposition)
        )
    elif r.decomposition_note:
        out.append(Verdict(tone="info", label="TTFT", text=r.decomposition_note))
    return tuple(out)


def decomposition_verdicts(d: Decomposition) -> list[str]:
    """The decomposition's verdicts; a single class's repeat of the run's is left out."""
    if len(d.classes) > 1:
        return list(d.verdicts)
    repeated = {v for c in d.classes for v in c.verdicts}
    return [v for v in d.verdicts if v not in repeated]


# ----------------------------------------------------------------- tables


def html_table(
    caption: str, header: Sequence[str], rows: Sequence[Sequence[str]], *, numeric_from: int = 1
) -> str:
    """A captioned table; columns from ``numeric_from`` on are right-aligned."""

    def cls(i: int) -> str:
        return ' class="n"' if i >= numeric_from else ""

    head = "".join(f'<th{cls(i)} scope="col">{escape(h)}</th>' for i, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join(f"<td{cls(i)}>{escape(c)}</td>" for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return (
        f'<div class="scroll"><table><caption>{escape(caption)}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )


def metrics_table(c: ClassSummary, caption: str) -> str:
    """One row per metric with samples: count, mean, percentiles, max."""
    pcts = c.metrics[0].percentiles if c.metrics else ()
    header = ["metric", "n", "mean", *(f"p{p.percentile:g}" for p in pcts), "max"]
    rows = [
        [
            f"{m.name} ({m.unit})",
            f"{m.count:,}",
            fmt.number(m.mean),
            *(fmt.number(p.value) for p in m.percentiles),
            fmt.number(m.max),
        ]
        for m in c.metrics
        if m.count
    ]
    return html_table(caption, header, rows)


def classes_table(a: Analysis) -> str:
    """Outcomes, throughput, fidelity and goodput, one row per class and the run."""
    header = [
        "class", "requests", "ok", "errors", "req/s", "output tok/s", "total tok/s",
        "prompt |ratio-1| (median)", "cached share (tokens)", "goodput",
    ]  # fmt: skip
    embeddings = a.overall.embeddings > 0
    if embeddings:  # /v1/embeddings rows: items and input tokens, no output tokens
        header[5:5] = ["items/s", "input tok/s"]
    rows = []
    for c in (a.overall, *a.classes):
        f, g = c.fidelity, c.goodput
        row = [
            "all" if c is a.overall else c.workload,
            f"{c.requests:,}",
            f"{c.ok:,}",
            f"{c.error_rate:.1%}",
            f"{c.requests_per_s:.2f}",
            "-" if c.embeddings_only else f"{c.output_tokens_per_s:,.0f}",
            f"{c.total_tokens_per_s:,.0f}",
            fmt.percent(f.abs_error_median),
            fmt.percent(f.cached_share),
            fmt.percent(None if g is None else g.fraction),
        ]
        if embeddings:
            row[5:5] = [f"{c.items_per_s:,.1f}", f"{c.input_tokens_per_s:,.0f}"]
        rows.append(row)
    return html_table("Requests, throughput, fidelity and goodput", header, rows)


def analysis_tables(a: Analysis) -> str:
    """The run's tables: classes, then latency percentiles of the run and of each class."""
    parts = [classes_table(a), metrics_table(a.overall, "Latency, all requests")]
    if len(a.classes) > 1:
        parts += [metrics_table(c, f"Latency, class {c.workload}") for c in a.classes]
    if a.cache_by_turn:
        parts.append(cache_depth_table(a))
    parts.append(cache_note(a))
    outcomes = ", ".join(f"{o.outcome} {o.count:,}" for o in a.overall.outcomes) or "none"
    parts.append(f'<p class="note">Outcomes: {escape(outcomes)}.</p>')
    return "\n".join(parts)


def cache_depth_table(a: Analysis) -> str:
    """Prefix-cache reuse per session turn depth, token-weighted: reported, and beside it
    what the trace's prefixes allow where the expectation was computed."""
    expected = any(d.expected is not None for d in a.cache_by_turn)
    header = ["turn", "requests", "prompt tokens", "cached tokens", "cached share"]
    if expected:
        header += ["expected tokens", "expected share", "reported / expected"]
    rows = []
    for d in a.cache_by_turn:
        row = [
            str(d.turn),
            f"{d.requests:,}",
            f"{d.prompt_tokens:,}",
            f"{d.cached_tokens:,}",
            fmt.percent(d.share),
        ]
        if expected:
            x = d.expected
            row += [
                f"{x.expected_tokens:,}" if x is not None else fmt.MISSING,
                fmt.percent(x.expected_share if x is not None else None),
                fmt.percent(x.fidelity if x is not None else None),
            ]
        rows.append(row)
    return html_table("Prefix cache by turn depth (token-weighted)", header, rows)


def cache_note(a: Analysis) -> str:
    """The run's expected against reported cached share, and what the expectation rests on
    (empty when it was not asked for)."""
    lines = cache_lines(a)
    return f'<p class="note">{escape(" ".join(lines))}</p>' if lines else ""


def tail_table(c: ClassDecomposition) -> str:
    """Mean composition of each tail (adds up) with each term's budget in parentheses."""
    name = "all requests" if c.workload == "all" else f"class {c.workload}"
    header = ["term", *(f">= p{t.percentile:g}" for t in c.tails)]
    rows = []
    for term in TERMS:
        cells = []
        for t in c.tails:
            st = t.term(term)
            budget = f" ({fmt.number(st.budget_ms)})" if st.budget_ms is not None else ""
            cells.append(f"{fmt.number(st.tail_mean_ms)}{budget}")
        rows.append([term, *cells])
    if any(t.overshoot_mean_ms for t in c.tails):
        # Kept <= 0 so the parts add up; shown as the positive amount taken off.
        rows.append(
            ["overshoot (subtracted)", *(fmt.number(abs(t.overshoot_mean_ms)) for t in c.tails)]
        )
    rows.append(["TTFT from due (mean)", *(fmt.number(t.tail_mean_ttft_ms) for t in c.tails)])
    rows.append(["requests in the tail", *(f"{t.tail_requests:,}" for t in c.tails)])
    return html_table(f"TTFT tail composition, {name}: mean ms (budget)", header, rows)


def decomposition_tables(d: Decomposition) -> str:
    """The tail composition of the run (and of each class when there are several)."""
    classes = [d.overall, *d.classes] if len(d.classes) > 1 else [d.overall]
    sources = ", ".join(f"{x.term}: {x.source}" for x in d.sources)
    note = (
        f"Budget: {d.budget_source or 'none'}; network {fmt.number(d.network.value_ms)} ms "
        f"({d.network.source}); term sources: {sources}."
        + (f" Predictions: {d.prediction}." if d.prediction else "")
    )
    return "\n".join([*(tail_table(c) for c in classes), f'<p class="note">{escape(note)}</p>'])
