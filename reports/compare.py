"""Rendering of comparisons: runs against a base run, sweeps against load, two sweeps.

Console (rich) and Markdown. Rendering only: every number comes from
``analyzers.compare.runs.Comparison`` or ``analyzers.compare.sweep.SweepAnalysis`` /
``analyzers.compare.crossover.SweepComparison``.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from analyzers.compare.crossover import SweepComparison
from analyzers.compare.runs import Comparison, ComponentDelta, MetricDelta
from analyzers.compare.sweep import SweepAnalysis
from analyzers.compare.verdict import ComparisonVerdict
from reports import fmt


def _delta_cells(d: MetricDelta) -> tuple[str, str, str, str, str, str]:
    diff = d.difference
    stat = f"p{d.percentile:g}" if d.percentile is not None else "-"
    a = diff.absolute
    if d.unit == "fraction":
        change = f"{a.estimate * 100:+.1f} pts [{a.low * 100:+.1f}, {a.high * 100:+.1f}]"
    else:
        change = f"{a.estimate:+.3g} [{a.low:+.3g}, {a.high:+.3g}]"
    rel = diff.relative
    relative = f"{rel.estimate:+.0%} [{rel.low:+.0%}, {rel.high:+.0%}]" if rel else "-"
    return (
        f"{d.name} ({d.unit})" if d.unit != "fraction" else d.name,
        stat,
        fmt.in_unit(diff.a, d.unit),
        fmt.in_unit(diff.b, d.unit),
        change,
        relative,
    )


def comparison_renderables(c: Comparison) -> list[RenderableType]:
    """Per class, per pair: a metrics table and (when reported) a TTFT components table;
    then the verdict lines and notes."""
    out: list[RenderableType] = []
    pairs = sorted({(d.workload, d.label) for d in c.metrics}, key=lambda p: (p[0] != "all", p))
    conf = f"{c.options.confidence:.0%}"
    for workload, label in pairs:
        rows = [d for d in c.metrics if d.workload == workload and d.label == label]
        table = Table(title=f"{label} vs {c.labels[0]} — {workload}", title_justify="left")
        for column in ("metric", "stat", c.labels[0], label, f"diff [{conf} CI]", "relative"):
            table.add_column(column, justify="left" if column == "metric" else "right")
        for d in rows:
            cells = _delta_cells(d)
            style = "bold" if d.difference.significant else "dim"
            table.add_row(*cells, style=style)
        out.append(table)
        comps = [x for x in c.components if x.workload == workload and x.label == label]
        if comps:
            out.append(_components_table(comps, c.labels[0], label, conf))
    for v in c.verdicts:
        withheld = c.verdict is not None and c.verdict.withheld
        out.append(Text(f"• {v}", "bold yellow" if withheld else ""))
    for n in c.notes:
        out.append(Text(f"note: {n}", "yellow"))
    return out


def _components_table(comps: list[ComponentDelta], base: str, label: str, conf: str) -> Table:
    table = Table(title=f"TTFT components (ms) — {label} vs {base}", title_justify="left")
    for column in ("term", "stat", base, label, f"diff [{conf} CI]", "share of TTFT change"):
        table.add_column(column, justify="left" if column == "term" else "right")
    for x in comps:
        d = x.difference
        a = d.absolute
        table.add_row(
            x.term,
            f"p{x.percentile:g}",
            fmt.number(d.a),
            fmt.number(d.b),
            f"{a.estimate:+.3g} [{a.low:+.3g}, {a.high:+.3g}]",
            f"{x.attributed_ms:+.3g}" if x.attributed_ms is not None else "-",
            style="bold" if d.significant else "dim",
        )
    return table


def comparison_markdown(c: Comparison) -> str:
    """The comparison as Markdown: verdicts first, then one table per class and pair."""
    lines = [f"## {' vs '.join(reversed(c.labels[:2]))}" if len(c.labels) == 2 else "## Compare"]
    lines += ["", *(f"- {v}" for v in c.verdicts), ""]
    conf = f"{c.options.confidence:.0%}"
    pairs = sorted({(d.workload, d.label) for d in c.metrics}, key=lambda p: (p[0] != "all", p))
    for workload, label in pairs:
        lines += [
            f"### {label} vs {c.labels[0]}: {workload}",
            "",
            f"| metric | stat | {c.labels[0]} | {label} | diff [{conf} CI] | relative |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for d in c.metrics:
            if d.workload == workload and d.label == label:
                lines.append("| " + " | ".join(_delta_cells(d)) + " |")
        lines.append("")
    for n in c.notes:
        lines.append(f"> {n}")
    return "\n".join(lines).rstrip() + "\n"


def sweep_table(s: SweepAnalysis) -> Table:
    """One row per step: offered and achieved load, latency, goodput, SLO verdict."""
    unit = s.load_unit
    scale = f" (server clock, time scale {s.time_scale:g})" if s.time_scale != 1 else ""
    table = Table(title=f"Sweep {s.label}: {s.path}{scale}", title_justify="left")
    for column in (
        f"offered ({unit})",
        "achieved req/s",
        "out tok/s",
        "TTFT p50",
        "TTFT p99",
        "TPOT p50",
        "TPOT p99",
        "E2E p99",
        "errors",
        "goodput",
        "SLO",
        "validity",
    ):
        table.add_column(column, justify="right")
    for st in s.steps:
        slo = fmt.slo_word(st.meets_slo)
        table.add_row(
            f"{st.offered:.3g} ({st.label})",
            fmt.number(st.achieved_rps),
            fmt.number(st.output_tokens_per_s),
            fmt.number(st.ttft_p50_ms),
            fmt.number(st.ttft_p99_ms),
            fmt.number(st.tpot_p50_ms),
            fmt.number(st.tpot_p99_ms),
            fmt.number(st.e2e_p99_ms),
            f"{st.error_rate:.1%}",
            fmt.percent(st.goodput),
            Text(slo, "green" if st.meets_slo else "red" if st.meets_slo is False else ""),
            Text(fmt.flags(tuple(f.kind for f in st.flags)), "" if st.valid else "yellow"),
            style="bold" if s.knee is st else "",
        )
    return table


def sweep_renderables(s: SweepAnalysis) -> list[RenderableType]:
    """The sweep table and the knee line."""
    knee = (
        f"knee: {s.knee.offered:.3g} {s.load_unit} ({s.knee.label}): {s.knee_note}"
        if s.knee is not None
        else f"knee: none ({s.knee_note})"
    )
    return [sweep_table(s), Text(knee, "bold")]


def sweep_comparison_renderables(c: SweepComparison) -> list[RenderableType]:
    """Both sweeps, the joint goodput curve and the verdicts (knees, crossover)."""
    out: list[RenderableType] = [sweep_table(c.a), sweep_table(c.b)]
    curve = Table(title="Goodput against offered load", title_justify="left")
    for column in (f"offered ({c.a.load_unit})", c.a.label, c.b.label, "lead"):
        curve.add_column(column, justify="right")
    for p in c.points:
        lead = "-"
        if p.a is not None and p.b is not None:
            lead = f"{(p.b - p.a) * 100:+.1f} pts"
        curve.add_row(
            f"{p.load:.3g}",
            fmt.percent(p.a),
            fmt.percent(p.b),
            lead,
        )
    out.append(curve)
    out.extend(Text(f"• {v}", "bold") for v in c.verdicts[:-1])
    out.append(verdict_text(c.verdict))
    return out


def verdict_text(v: ComparisonVerdict) -> Text:
    """A comparison's verdict on the console: its one line verbatim, yellow when withheld."""
    return Text(f"• {v.text}", "bold yellow" if v.withheld else "bold")


def sweep_comparison_markdown(c: SweepComparison) -> str:
    """Both goodput curves and the verdicts as Markdown."""
    lines = [f"## {c.b.label} vs {c.a.label} against load", ""]
    lines += [f"- {v}" for v in c.verdicts[:-1]]
    lines.append(f"- {'⚠️ ' if c.verdict.withheld else ''}{c.verdict.text}")
    lines += [
        "",
        f"| offered ({c.a.load_unit}) | {c.a.label} goodput | {c.b.label} goodput |",
        "|---:|---:|---:|",
    ]
    for p in c.points:
        lines.append(f"| {p.load:.3g} | {fmt.percent(p.a)} | {fmt.percent(p.b)} |")
    invalid = [
        f"- ⚠️ {s.label} {st.label}: {'; '.join(f.reason for f in st.flags)}"
        for s in (c.a, c.b)
        for st in s.steps
        if not st.valid
    ]
    if invalid:
        lines += ["", "Invalid steps:", "", *invalid]
    return "\n".join(lines) + "\n"
