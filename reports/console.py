"""Console rendering of the end-of-run summary (rich tables). Rendering only, no metric maths."""

from __future__ import annotations

from rich.table import Table

from analyzers.analysis import Analysis
from reports.tables import class_lines, metrics_table


def summary_table(summary: Analysis, title: str = "Run summary") -> Table:
    """Latency percentiles of the whole run, one row per metric."""
    return metrics_table(summary.overall, title)


def totals_lines(summary: Analysis) -> list[str]:
    """Outcome, throughput, fidelity and goodput lines under the table."""
    return class_lines(summary.overall)
