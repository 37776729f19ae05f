"""The Markdown summary of a report, for pull requests and CI job summaries: what was run,
the verdicts, the key numbers per class, and the comparison and sweep tables. No charts
(they live in the HTML file). Rendering only: every number comes from the ``Report`` the
analyzers filled. Must not import loadgen.
"""

from __future__ import annotations

from collections.abc import Sequence

from analyzers import exprs as e
from reports import fmt
from reports.cache import cache_lines
from reports.html.report import Report
from reports.html.run import RunReport, Verdict

_ICON = {"ok": "✅", "warn": "⚠️", "bad": "❌", "info": "ℹ️"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A GitHub-flavoured Markdown table (first column left-aligned, the rest right)."""
    align = [":---", *("---:" for _ in header[1:])]
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _verdicts(verdicts: Sequence[Verdict]) -> list[str]:
    return [f"- {_ICON[v.tone]} **{_cell(v.label)}**: {_cell(v.text)}" for v in verdicts]


def _run(r: RunReport, heading: str) -> list[str]:
    f = r.facts
    facts = [
        ("trace", f.trace),
        ("endpoint", f.endpoint),
        ("model", f.model),
        ("load", f.load),
        ("duration", f"{f.duration_s:.1f} s" if f.duration_s is not None else None),
        ("versions", f.versions),
    ]
    out = [f"## {heading}", ""]
    out += [f"- {k}: `{v}`" if k in ("trace", "endpoint") else f"- {k}: {v}" for k, v in facts if v]
    out += ["", "### Verdicts", "", *_verdicts(r.verdicts()), ""]
    a = r.analysis
    header = ["class", "requests", "errors", "TTFT p50", "TTFT p99", "TTFT from due p99",
              "TPOT p50", "TPOT p99", "E2E p99", "output tok/s", "goodput"]  # fmt: skip
    rows = []
    for c in (a.overall, *(a.classes if len(a.classes) > 1 else ())):
        ttft, due = c.metric(e.TTFT_MS), c.metric(e.TTFT_FROM_DUE_MS)
        tpot, e2e = c.metric(e.TPOT_MS), c.metric(e.E2E_MS)
        rows.append(
            [
                "all" if c is a.overall else c.workload,
                f"{c.requests:,}",
                f"{c.error_rate:.1%}",
                fmt.number(ttft.value(50.0)),
                fmt.number(ttft.value(99.0)),
                fmt.number(due.value(99.0)),
                fmt.number(tpot.value(50.0)),
                fmt.number(tpot.value(99.0)),
                fmt.number(e2e.value(99.0)),
                (
                    f"{c.items_per_s:,.1f} items/s"
                    if c.embeddings_only
                    else f"{c.output_tokens_per_s:,.0f}"
                ),
                fmt.percent(None if c.goodput is None else c.goodput.fraction),
            ]
        )
    out += ["Latencies in ms (TPOT in ms/token).", "", *table(header, rows), ""]
    cache = cache_lines(a)
    if cache:
        out += [f"- {line}" for line in cache] + [""]
    return out


def _comparison(report: Report) -> list[str]:
    c = report.comparison
    if c is None:
        return []
    warn = "⚠️ " if c.verdict is not None and c.verdict.withheld else ""
    out = ["## Comparison", "", *(f"- {warn}{_cell(v)}" for v in c.verdicts)]
    out += [f"- ⚠️ {_cell(n)}" for n in c.notes]
    header = ["metric", "run", "base", "value", "difference", "interval", "relative"]
    rows = [
        [
            f"{d.name} p{d.percentile:g}" if d.percentile is not None else d.name,
            d.label,
            fmt.number(d.difference.a),
            fmt.number(d.difference.b),
            f"{d.difference.absolute.estimate:+,.2f}" + (" *" if d.difference.significant else ""),
            fmt.signed_interval(d.difference.absolute.low, d.difference.absolute.high),
            "-" if d.difference.relative is None else f"{d.difference.relative.estimate:+.1%}",
        ]
        for d in c.metrics
        if d.workload == e.ALL
    ]
    note = f"All requests; {c.options.confidence:.0%} bootstrap intervals; * excludes 0."
    return [*out, "", note, "", *table(header, rows), ""]


def _sweeps(report: Report) -> list[str]:
    if not report.sweeps:
        return []
    out = ["## Load sweep", ""]
    out += [f"- knee {s.label}: {_cell(s.knee_note)}" for s in report.sweeps]
    if report.sweep_comparison is not None:
        v = report.sweep_comparison.verdict
        out.append(f"- {'⚠️ ' if v.withheld else ''}{_cell(v.text)}")
    for s in report.sweeps:
        header = [f"offered ({s.load_unit})", "achieved req/s", "TTFT p99 (ms)",
                  "TPOT p99 (ms)", "errors", "goodput", "SLO", "validity"]  # fmt: skip
        rows = [
            [
                f"{st.offered:g}",
                f"{st.achieved_rps:.2f}",
                fmt.number(st.ttft_p99_ms),
                fmt.number(st.tpot_p99_ms),
                f"{st.error_rate:.1%}",
                fmt.percent(st.goodput),
                fmt.slo_word(st.meets_slo),
                fmt.flags(tuple(f.kind for f in st.flags)),
            ]
            for st in s.steps
        ]
        out += ["", f"### {s.label}", "", *table(header, rows)]
    return [*out, ""]


def render_markdown(report: Report) -> str:
    """The Markdown summary of ``report``."""
    out = [f"# {report.title}", ""]
    for i, r in enumerate(report.runs):
        out += _run(r, f"Run {r.label}" if len(report.runs) > 1 or i else "Run")
        if i == 0:
            out += _comparison(report)
    out += _sweeps(report)
    out.append("_Charts: see the HTML report._")
    return "\n".join(out) + "\n"
