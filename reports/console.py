"""Console rendering of run summaries (rich tables). Rendering only, no metric maths."""

from __future__ import annotations

from rich.table import Table

from analyzers.metrics import RunSummary


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def summary_table(summary: RunSummary, title: str = "Run summary") -> Table:
    """Latency percentiles per metric, one row each."""
    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    table.add_column("n", justify="right")
    table.add_column("mean", justify="right")
    percentiles = summary.metrics[0].percentiles if summary.metrics else ()
    for p, _ in percentiles:
        table.add_column(f"p{p:g}", justify="right")
    for row in summary.metrics:
        table.add_row(
            f"{row.name} ({row.unit})",
            str(row.count),
            _fmt(row.mean),
            *(_fmt(v) for _, v in row.percentiles),
        )
    return table


def totals_lines(summary: RunSummary) -> list[str]:
    """Throughput and outcome lines under the table."""
    outcomes = ", ".join(f"{name} {count}" for name, count in summary.by_outcome) or "none"
    return [
        f"requests: {summary.requests} ({outcomes}) over {summary.duration_s:.1f} s",
        f"throughput: {summary.requests_per_s:.2f} req/s, "
        f"{summary.output_tokens_per_s:,.0f} output tokens/s ({summary.output_tokens:,} tokens)",
    ]
