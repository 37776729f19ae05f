"""Rendering of a gate's verdict: a console table, JUnit XML and Markdown.

Rendering only: every number comes from ``analyzers.slo.gate.GateReport``. The JUnit file has
one ``testsuite`` (named after the run) with one ``testcase`` per objective and per
baseline check, plus one for the run's validity and one for the endpoint; a failed check
carries a ``failure`` element, so CI systems list every objective by name.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from analyzers.slo.evaluate import ObjectiveResult
from analyzers.slo.gate import GateReport, RegressionResult
from analyzers.slo.parse import format_value

_STATUS_STYLE = {"pass": "green", "fail": "bold red", "no_data": "yellow"}


def _observed(r: ObjectiveResult) -> str:
    return format_value(r.observed, r.objective.unit) if r.observed is not None else "-"


def _margin(r: ObjectiveResult) -> str:
    if r.margin is None:
        return "-"
    text = format_value(r.margin, r.objective.unit)
    if r.margin_fraction is not None:
        text += f" ({r.margin_fraction:+.0%})"
    return text


def _regression_cells(r: RegressionResult) -> tuple[str, str, str, str]:
    d = r.difference
    rel = d.relative
    name = f"{r.workload}:{r.metric}" + (f".p{r.percentile:g}" if r.percentile is not None else "")
    change = f"{rel.estimate:+.1%} [{rel.low:+.1%}, {rel.high:+.1%}]" if rel is not None else "-"
    return name, f"{d.a:.4g} -> {d.b:.4g}", change, "REGRESSION" if r.failed else "ok"


def gate_renderables(report: GateReport) -> list[RenderableType]:
    """The console view: objectives, baseline checks, problems and the verdict line."""
    out: list[RenderableType] = []
    table = Table(title=f"SLO gate: {report.run}", title_justify="left")
    for column, justify in (
        ("objective", "left"),
        ("observed", "right"),
        ("margin", "right"),
        ("n", "right"),
        ("status", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for r in report.objectives:
        table.add_row(
            r.objective.label,
            _observed(r),
            _margin(r),
            str(r.samples),
            Text(r.status.upper() if r.status != "no_data" else "NO DATA", _STATUS_STYLE[r.status]),
        )
    if report.objectives:
        out.append(table)
    if report.regressions:
        reg = Table(title=f"Against baseline {report.baseline}", title_justify="left")
        for column in ("check", "baseline -> run", "change [95% CI]", "status"):
            reg.add_column(column)
        for g in report.regressions:
            name, values, change, status = _regression_cells(g)
            reg.add_row(name, values, change, Text(status, "bold red" if g.failed else "green"))
        out.append(reg)
    for problem in report.problems:
        out.append(Text(f"validity: {problem}", "yellow"))
    for warning in report.warnings:
        out.append(Text(f"warning: {warning}", "yellow"))
    if report.infra.reason:
        out.append(Text(f"endpoint: {report.infra.reason}", "bold red"))
    style = "bold green" if report.verdict == "pass" else "bold red"
    out.append(Text(f"{report.summary}  (exit {report.exit_code})", style))
    return out


def junit_xml(report: GateReport, suite: str = "loadgen gate") -> str:
    """JUnit XML: ``testsuites/testsuite/testcase[/failure]``, one case per check."""
    cases: list[tuple[str, str, str | None, str]] = []  # name, classname, failure, output
    cases.append(
        (
            "endpoint reachable",
            "infrastructure",
            report.infra.reason,
            f"{report.infra.unreachable} of {report.infra.requests} requests unreachable",
        )
    )
    cases.append(
        (
            "run validity",
            "validity",
            "; ".join(report.problems) if report.problems else None,
            "valid" if not report.problems else "",
        )
    )
    for r in report.objectives:
        failure = None if r.passed else r.message
        cases.append((r.objective.label, "slo", failure, r.message))
    for g in report.regressions:
        name, _, _, _ = _regression_cells(g)
        cases.append(
            (f"{name} vs baseline", "regression", g.message if g.failed else None, g.message)
        )
    failures = sum(1 for c in cases if c[2] is not None)
    root = ET.Element("testsuites", name=suite, tests=str(len(cases)), failures=str(failures))
    ts = ET.SubElement(
        root,
        "testsuite",
        name=f"{suite}: {report.run}",
        tests=str(len(cases)),
        failures=str(failures),
        errors="0",
        skipped="0",
    )
    props = ET.SubElement(ts, "properties")
    ET.SubElement(props, "property", name="verdict", value=report.verdict)
    ET.SubElement(props, "property", name="exit_code", value=str(report.exit_code))
    if report.baseline:
        ET.SubElement(props, "property", name="baseline", value=report.baseline)
    for name, classname, failure, output in cases:
        case = ET.SubElement(ts, "testcase", name=name, classname=f"loadgen.{classname}")
        if failure is not None:
            kind = {"infrastructure": "InfrastructureError", "validity": "InvalidRun"}.get(
                classname, "SLOBreach"
            )
            el = ET.SubElement(case, "failure", message=failure, type=kind)
            el.text = failure
        if output:
            ET.SubElement(case, "system-out").text = output
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def gate_markdown(report: GateReport) -> str:
    """A GitHub-flavoured Markdown summary (tables; suitable for GITHUB_STEP_SUMMARY)."""
    icon = {"pass": "✅", "breach": "❌", "invalid": "⚠️", "infrastructure": "🔌"}[report.verdict]
    lines = [
        f"## {icon} SLO gate: {report.verdict.upper()} (exit {report.exit_code})",
        "",
        f"Run `{report.run}`: {report.requests} requests, error rate {report.error_rate:.2%}.",
        "",
        f"**{_md_escape(report.summary)}**",
        "",
    ]
    if report.objectives:
        lines += ["| objective | observed | margin | n | status |", "|---|---:|---:|---:|---|"]
        for r in report.objectives:
            status = {"pass": "✅ pass", "fail": "❌ fail", "no_data": "⚠️ no data"}[r.status]
            lines.append(
                f"| `{_md_escape(r.objective.label)}` | {_observed(r)} | {_margin(r)} | "
                f"{r.samples} | {status} |"
            )
        lines.append("")
    if report.regressions:
        lines += [
            f"Against baseline `{report.baseline}` (fails only when worse by more than the "
            "tolerance and the 95% interval excludes no change):",
            "",
            "| check | baseline → run | change [95% CI] | status |",
            "|---|---:|---:|---|",
        ]
        for g in report.regressions:
            name, values, change, status = _regression_cells(g)
            mark = "❌ regression" if g.failed else "✅ ok"
            lines.append(f"| `{name}` | {values.replace('->', '→')} | {change} | {mark} |")
        lines.append("")
    for problem in report.problems:
        lines.append(f"- ⚠️ validity: {_md_escape(problem)}")
    for warning in report.warnings:
        lines.append(f"- ⚠️ warning: {_md_escape(warning)}")
    if report.infra.reason:
        lines.append(f"- 🔌 endpoint: {_md_escape(report.infra.reason)}")
    return "\n".join(lines).rstrip() + "\n"
