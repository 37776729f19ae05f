"""The HTML report: one self-contained file (inline CSS and SVG, no script, no font, no
network) for a run, a comparison or a sweep.

``build_report`` asks the analyzers for every number (``metrics.analyze``,
``decompose.decompose``, ``timeseries.run_series``, ``slo_eval.evaluate``, and the comparison
and sweep analyzers); ``render_html`` lays them out: what was run, the verdicts (SLO gate,
validity), the tables, then the charts. ``write_report`` does both and writes the file.
The page carries a Content-Security-Policy that forbids every load but inline styles and
``data:`` images, so a stray reference cannot reach the network. Must not import loadgen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from html import escape
from pathlib import Path
from typing import Final

from analyzers.compare.crossover import SweepComparison
from analyzers.compare.runs import Comparison
from analyzers.compare.sweep import SweepAnalysis
from analyzers.compare.verdict import ComparisonVerdict
from reports import fmt
from reports.charts.figure import Chart
from reports.html.run import (
    ReportOptions,
    RunFacts,
    RunReport,
    Verdict,
    analysis_tables,
    decomposition_tables,
    gate_slos,
    html_table,
    load_run_report,
)
from reports.theme import PAGE_CSS

CSP: Final = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
"""The page's Content-Security-Policy: inline styles and data: images, nothing else."""

# ----------------------------------------------------------------- page


def _verdict_list(verdicts: Sequence[Verdict]) -> str:
    items = "".join(
        f'<li class="{v.tone}"><span class="badge">{escape(v.label)}</span>{escape(v.text)}</li>'
        for v in verdicts
    )
    return f'<ul class="verdicts">{items}</ul>'


def _facts(f: RunFacts) -> str:
    rows = [
        ("run", f.run_id or f.path),
        ("directory", f.path),
        ("trace", f.trace),
        ("endpoint", f.endpoint),
        ("model", f.model),
        ("load", f.load),
        ("started", f.started),
        ("duration", f"{f.duration_s:.1f} s" if f.duration_s is not None else None),
        ("status", f.status),
        ("versions", f.versions),
    ]
    body = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in rows if v)
    return f'<dl class="facts">{body}</dl>'


def figure(chart: Chart) -> str:
    """A chart as a ``<figure>`` with its heading and caption."""
    return (
        f'<figure id="{chart.chart_id}"><h3>{escape(chart.title)}</h3>{chart.svg}'
        f"<figcaption>{escape(chart.caption)}</figcaption></figure>"
    )


def run_charts(r: RunReport, *, prefix: str = "") -> list[Chart]:
    """The charts of one run, in page order; ``prefix`` keeps their ids unique when a page
    shows several runs."""
    from reports.charts import run as cr

    slo = r.options.slo_ttft_ms
    charts = [cr.ttft_cdf_chart(r.series, slo, prefix=prefix)]
    if r.decomposition is not None:
        charts.append(cr.decomposition_chart(r.decomposition, prefix=prefix))
    charts += [
        cr.latency_over_time_chart(r.series, slo, prefix=prefix),
        cr.itl_chart(r.series, prefix=prefix),
        cr.throughput_chart(r.analysis, prefix=prefix),
        cr.fidelity_chart(r.series, prefix=prefix),
    ]
    if r.analysis.cache_by_turn:
        from reports.charts.cache import cache_depth_chart

        charts.append(cache_depth_chart(r.analysis, prefix=prefix))
    return charts


def run_section(r: RunReport, *, heading: str | None = None, prefix: str = "") -> str:
    """Header facts, verdicts, tables and charts of one run."""
    parts = []
    if heading:
        parts.append(f"<h2>{escape(heading)}</h2>")
    parts += [
        "<h2>What was run</h2>",
        _facts(r.facts),
        "<h2>Verdicts</h2>",
        _verdict_list(r.verdicts()),
        "<h2>Tables</h2>",
        analysis_tables(r.analysis),
    ]
    if r.decomposition is not None:
        parts.append(decomposition_tables(r.decomposition))
    parts.append("<h2>Charts</h2>")
    parts += [figure(c) for c in run_charts(r, prefix=prefix)]
    return "\n".join(parts)


def page(title: str, subtitle: str, body: str, *, generator: str) -> str:
    """The whole document around ``body``."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="color-scheme" content="light dark">'
        f"<title>{escape(title)}</title><style>{PAGE_CSS}</style></head>\n"
        f'<body><header><h1>{escape(title)}</h1><p class="sub">{escape(subtitle)}</p></header>\n'
        f"<main>\n{body}\n</main>\n"
        f"<footer>{escape(generator)}; self-contained: no scripts, fonts or network "
        "loads.</footer></body></html>\n"
    )


def generator_line() -> str:
    """Which llm-loadgen wrote the report."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"written by llm-loadgen {version('llm-loadgen')} (loadgen report)"
    except PackageNotFoundError:  # running from a source tree without installing
        return "written by llm-loadgen (loadgen report)"


def write_html(text: str, out: Path) -> Path:
    """Write a page (creating the directory) and return its path."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out


# ----------------------------------------------------------------- comparisons and sweeps


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """A whole report: the runs (the first is the subject, the others are compared with it
    in ``comparison``), and the sweeps (``sweep_comparison`` when there are two)."""

    runs: tuple[RunReport, ...] = ()
    comparison: Comparison | None = None
    sweeps: tuple[SweepAnalysis, ...] = ()
    sweep_comparison: SweepComparison | None = None
    options: ReportOptions = field(default_factory=ReportOptions)

    @property
    def title(self) -> str:
        """The page title."""
        if self.comparison is not None:
            return "Comparison: " + " vs ".join(self.comparison.labels)
        if self.runs:
            return f"Load test report: {self.runs[0].label}"
        if self.sweep_comparison is not None:
            return f"Sweeps: {self.sweep_comparison.a.label} vs {self.sweep_comparison.b.label}"
        return "Load sweep: " + ", ".join(s.label for s in self.sweeps)


def build_report(
    *,
    runs: Sequence[Path | str] = (),
    sweeps: Sequence[Path | str] = (),
    options: ReportOptions | None = None,
    labels: Sequence[str] | None = None,
    allow_different_traces: bool = False,
    comparison: Comparison | None = None,
    sweep_comparison: SweepComparison | None = None,
) -> Report:
    """Ask the analyzers for everything a report of ``runs`` and ``sweeps`` shows.

    One run: its report. Several: each with its own sections, and every run after the
    first compared with it (``compare.compare_runs``). One sweep: its steps and knee; two:
    also the crossover (``crossover.compare_sweeps``). A ``comparison`` or ``sweep_comparison``
    already made (the one a command printed) is used as is, so that the page and the
    console show the same verdict.
    """
    from analyzers.compare.crossover import compare_sweeps
    from analyzers.compare.runs import CompareOptions, compare_runs
    from analyzers.compare.sweep import SweepOptions, analyze_sweep
    from analyzers.goodput import SLOTargets

    options = options or ReportOptions()
    if not runs and not sweeps and sweep_comparison is None:
        raise ValueError("a report needs at least one run or sweep")
    names = list(labels) if labels else []
    run_reports = tuple(
        load_run_report(r, options, label=names[i] if i < len(names) else None)
        for i, r in enumerate(runs)
    )
    slos = gate_slos(options)
    if len(runs) > 1 and comparison is None:
        goodput = slos.goodput
        if goodput == SLOTargets() and options.slo_ttft_ms is not None:
            goodput = SLOTargets(ttft_ms=options.slo_ttft_ms)
        comparison = compare_runs(
            list(runs),
            CompareOptions(
                selection=options.selection,
                goodput=goodput if goodput != SLOTargets() else None,
                allow_different_traces=allow_different_traces,
                labels=tuple(r.label for r in run_reports),
                time_scale=options.time_scale,
            ),
        )
    if slos.goodput == SLOTargets() and options.slo_ttft_ms is not None:
        # --slo-ttft-ms alone still gives the sweeps a goodput curve (and a crossover).
        slos = replace(slos, goodput=SLOTargets(ttft_ms=options.slo_ttft_ms))
    sweep_options = SweepOptions(slos=slos, selection=options.selection)
    sweep_results: tuple[SweepAnalysis, ...] = ()
    if sweep_comparison is not None:
        sweep_results = (sweep_comparison.a, sweep_comparison.b)
    elif len(sweeps) == 2:
        sweep_comparison = compare_sweeps(
            sweeps[0], sweeps[1], sweep_options, allow_different_traces=allow_different_traces
        )
        sweep_results = (sweep_comparison.a, sweep_comparison.b)
    else:
        sweep_results = tuple(analyze_sweep(s, sweep_options) for s in sweeps)
    return Report(
        runs=run_reports,
        comparison=comparison,
        sweeps=sweep_results,
        sweep_comparison=sweep_comparison,
        options=options,
    )


def comparison_section(report: Report) -> str:
    """Verdicts, the difference table and the comparison charts."""
    from reports.charts.compare import deltas_chart, overlaid_cdf_chart

    c = report.comparison
    assert c is not None
    # A single class repeats the run's rows: show classes only when there are several.
    classes = {d.workload for d in c.metrics} - {"all"}
    keep = {"all"} | (classes if len(classes) > 1 else set())
    verdicts = [
        verdict_item(c.verdict, "compare")
        if c.verdict is not None
        else Verdict(tone="info", label="compare", text=v)
        for v in c.verdicts
    ]
    verdicts += [Verdict(tone="warn", label="note", text=n) for n in c.notes]
    header = ["class", "metric", "base", "run", "base value", "value", "difference",
              f"{c.options.confidence:.0%} interval", "relative"]  # fmt: skip
    rows = []
    for d in (d for d in c.metrics if d.workload in keep):
        diff = d.difference
        stat = f" p{d.percentile:g}" if d.percentile is not None else ""
        unit = "" if d.unit == "fraction" else f" {d.unit}"
        rel = diff.relative
        rows.append(
            [
                d.workload,
                f"{d.name}{stat}",
                d.base_label,
                d.label,
                fmt.number(diff.a),
                fmt.number(diff.b),
                f"{diff.absolute.estimate:+,.2f}{unit}" + (" *" if diff.significant else ""),
                fmt.signed_interval(diff.absolute.low, diff.absolute.high, unit),
                "-" if rel is None else f"{rel.estimate:+.1%}",
            ]
        )
    parts = [
        "<h2>Comparison</h2>",
        _verdict_list(verdicts),
        html_table(
            "Differences against the base run (* the interval excludes 0)",
            header,
            rows,
            numeric_from=4,
        ),
    ]
    if c.components:
        comp_rows = [
            [
                d.workload,
                d.term,
                f"p{d.percentile:g}",
                d.label,
                fmt.number(d.difference.a),
                fmt.number(d.difference.b),
                f"{d.difference.absolute.estimate:+,.2f} ms",
                fmt.signed_interval(d.difference.absolute.low, d.difference.absolute.high, " ms"),
                fmt.number(d.attributed_ms),
            ]
            for d in c.components
            if d.workload in keep
        ]
        parts.append(
            html_table(
                "TTFT components against the base run (ms)",
                [
                    "class",
                    "term",
                    "percentile",
                    "run",
                    "base",
                    "value",
                    "difference",
                    "interval",
                    "share of TTFT difference",
                ],
                comp_rows,
                numeric_from=4,
            )
        )
    parts.append(
        figure(
            overlaid_cdf_chart(
                [r.label for r in report.runs],
                [r.series for r in report.runs],
                report.options.slo_ttft_ms,
            )
        )
    )
    parts.append(figure(deltas_chart(c)))
    if c.options.time_scale != 1.0:
        parts.append(f'<p class="note">{escape(time_scale_note(c.options.time_scale))}</p>')
    return "\n".join(parts)


def time_scale_note(time_scale: float) -> str:
    """How the tables relate to what the client measured, as a factor (a simulator at time
    scale 0.25 ran four times faster than its model: client latencies x4.0)."""
    return (
        f"The tables are on the server's clock: client latencies x{1 / time_scale:.3g} (the "
        f"simulator ran {time_scale:g} wall seconds per model second); the charts show what "
        "the client measured."
    )


def verdict_item(v: ComparisonVerdict, label: str) -> Verdict:
    """A comparison's verdict as a verdict-list line: its text verbatim, a warning when
    withheld."""
    if v.withheld:
        return Verdict(tone="warn", label="no verdict", text=v.text)
    return Verdict(tone="ok" if v.declared else "info", label=label, text=v.text)


def sweep_section(report: Report) -> str:
    """Per sweep: its steps and knee; the crossover of two; the chart."""
    from reports.charts.compare import sweep_chart

    parts = ["<h2>Load sweep</h2>"]
    verdicts = [
        Verdict(tone="ok" if s.knee is not None else "warn", label=f"knee {s.label}",
                text=s.knee_note)
        for s in report.sweeps
    ]  # fmt: skip
    if report.sweep_comparison is not None:
        # The knee lines are above; the comparison's answer is its verdict, verbatim.
        verdicts.append(verdict_item(report.sweep_comparison.verdict, "crossover"))
    parts.append(_verdict_list(verdicts))
    for s in report.sweeps:
        header = ["step", f"offered ({s.load_unit})", "achieved req/s", "output tok/s",
                  "requests", "errors", "TTFT p50", "TTFT p99", "TPOT p99", "E2E p99",
                  "goodput", "SLO", "validity"]  # fmt: skip
        rows = [
            [
                st.label,
                f"{st.offered:g}",
                f"{st.achieved_rps:.2f}",
                f"{st.output_tokens_per_s:,.0f}",
                f"{st.requests:,}",
                f"{st.error_rate:.1%}",
                fmt.number(st.ttft_p50_ms),
                fmt.number(st.ttft_p99_ms),
                fmt.number(st.tpot_p99_ms),
                fmt.number(st.e2e_p99_ms),
                fmt.percent(st.goodput),
                fmt.slo_word(st.meets_slo),
                fmt.flags(tuple(f.kind for f in st.flags)),
            ]
            for st in s.steps
        ]
        parts.append(html_table(f"Sweep {s.label} ({s.mode}), latencies in ms", header, rows))
    parts.append(
        figure(sweep_chart(report.sweeps, report.sweep_comparison, report.options.slo_ttft_ms))
    )
    return "\n".join(parts)


def render_html(report: Report) -> str:
    """The page of a report. One run: its sections. Several runs or sweeps: the comparison
    and the sweeps first (what the reader came for), then each run's own sections."""
    sections = []
    several = len(report.runs) > 1
    if report.comparison is not None:
        sections.append(comparison_section(report))
    if report.sweeps and (several or not report.runs):
        sections.append(sweep_section(report))
    for i, r in enumerate(report.runs):
        sections.append(
            run_section(
                r, heading=f"Run {r.label}" if several else None, prefix=r.label if i else ""
            )
        )
    if report.sweeps and report.runs and not several:
        sections.append(sweep_section(report))
    return page(report.title, _subtitle(report), "\n".join(sections), generator=generator_line())


def _subtitle(report: Report) -> str:
    if report.runs:
        a = report.runs[0].analysis.overall
        return (
            f"{a.requests:,} requests, {a.error_rate:.1%} errors, TTFT p99 "
            f"{fmt.ms(a.metric('ttft_from_due_ms').value(99.0))} from due"
            + (f"; compared with {len(report.runs) - 1} other run(s)" if report.comparison else "")
        )
    return f"{sum(len(s.steps) for s in report.sweeps)} steps"


def write_report(
    out: Path | str,
    *,
    runs: Sequence[Path | str] = (),
    sweeps: Sequence[Path | str] = (),
    options: ReportOptions | None = None,
    labels: Sequence[str] | None = None,
    markdown: Path | str | None = None,
    allow_different_traces: bool = False,
    comparison: Comparison | None = None,
    sweep_comparison: SweepComparison | None = None,
) -> Path:
    """Write the HTML report of ``runs`` and/or ``sweeps`` to ``out`` (and the Markdown
    summary to ``markdown`` when given); return the HTML file's path.

    ``runs``: one run, or several compared with the first; ``sweeps``: one sweep, or two
    whose crossover is found. ``options``: SLO, budget and row selection. ``labels`` name
    the runs (default: their directory names). ``comparison``/``sweep_comparison``: made
    already (see ``build_report``).
    """
    report = build_report(
        runs=runs,
        sweeps=sweeps,
        options=options,
        labels=labels,
        allow_different_traces=allow_different_traces,
        comparison=comparison,
        sweep_comparison=sweep_comparison,
    )
    return write_built(report, out, markdown)


def write_built(report: Report, out: Path | str, markdown: Path | str | None = None) -> Path:
    """Write a built report's HTML to ``out`` (and its Markdown summary to ``markdown``)."""
    path = write_html(render_html(report), Path(out))
    if markdown is not None:
        from reports.markdown import render_markdown

        md = Path(markdown)
        md.parent.mkdir(parents=True, exist_ok=True)
        md.write_text(render_markdown(report), encoding="utf-8")
    return path


def console_lines(report: Report) -> list[str]:
    """What a command that wrote ``report`` says on the console, one line each: the
    crossover verdict of two sweeps, a withheld comparison or knee (the same text as the
    page)."""
    lines = []
    if report.sweep_comparison is not None:
        lines.append(report.sweep_comparison.verdict.text)
    lines += [f"{s.label}: {s.knee_note}" for s in report.sweeps if s.knee_note.startswith("no ")]
    if report.comparison is not None and report.comparison.verdict is not None:
        lines.append(report.comparison.verdict.text)
    return lines
